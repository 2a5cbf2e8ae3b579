package audit_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
)

// envPassChild makes the test binary run one verification pass (TestMain)
// with the arguments it holds, as JSON: passArgs.
const envPassChild = "RXEDGE_AUDIT_TEST_PASS"

type passArgs struct {
	URL, Roster, State string
}

// stalledState is a state file whose save never happens: it says so on
// standard output, then waits to be killed.
type stalledState struct{ audit.FileState }

func (s stalledState) Save(context.Context, []byte) error {
	fmt.Println("saving")
	select {}
}

// passChild runs one pass against the central at a.URL with the state in
// a.State, and is killed between its read and its save.
func passChild(args string) int {
	var a passArgs
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	roster, err := provision.ParseRosterFile(a.Roster)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	nc, err := nats.Connect(a.URL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = audit.Verify(ctx, audit.Options{Conn: nc, Roster: roster, State: stalledState{audit.FileState(a.State)}})
	fmt.Fprintln(os.Stderr, "the pass ended without being killed:", err)
	return 1
}

// A pass killed with SIGKILL after its read, before its save, leaves the
// state as the last pass saved it; the next pass reads from there, so
// what arrived in between is verified: nothing is skipped.
func TestIncrementalKilledBeforeTheSave(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	state, roster := filepath.Join(dir, "verify.state"), filepath.Join(dir, "roster.txt")
	if err := os.WriteFile(roster, []byte(r.a.RosterLine()+r.b.RosterLine()), 0o600); err != nil {
		t.Fatal(err)
	}
	noAsk := func(o *audit.Options) { o.Asker = nil }
	r.pass(t, state, noAsk)
	saved, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	// What arrives between: ten movements and a checkpoint that forks the
	// log (sequence 5 rewritten under it).
	r.a.Movements(r.ctx, t, r.js, 10)
	r.a.Fork(r.ctx, t, r.js, 4)
	r.records += 11
	r.wait(t)
	args, _ := json.Marshal(passArgs{URL: r.nc.ConnectedUrl(), Roster: roster, State: state})
	runKilled(t, string(args))
	if now, err := os.ReadFile(state); err != nil || !bytes.Equal(now, saved) {
		t.Fatalf("the state file after the kill: %v; changed: %v", err, !bytes.Equal(now, saved))
	}
	rep := r.pass(t, state, noAsk)
	expect(t, rep, audit.Finding{Kind: audit.KindForked, Store: "S0042"})
	if rep.Records != 11 {
		t.Errorf("the pass after the kill read %d records, want the 11 the killed pass had read", rep.Records)
	}
}

// runKilled runs the test binary as a pass child, and kills it with
// SIGKILL once it says it is saving.
func runKilled(t *testing.T, args string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envPassChild+"="+args)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case l := <-line:
		if l != "saving" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the pass printed %q, not that it is saving; stderr: %s", l, stderr.String())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the pass did not reach its save in a minute; stderr: %s", stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.ExitCode() != -1 {
		t.Fatalf("the pass was not killed: %v", err)
	}
}
