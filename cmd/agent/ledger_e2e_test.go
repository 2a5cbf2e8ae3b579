//go:build unix

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/agentbin"
)

// TestLedgerVerifiedAcrossReplacedPC runs the real agent against a real
// central and checks its record with `hq verify`, the store's
// side and head office's meeting only through central: the agent signs
// and publishes checkpoints of 150 movements; its PC is then replaced (an
// empty data directory: a new file, a new log, a new signing key, the same
// store) and the new PC adds 40. With both keys in the roster, verify
// finds both logs whole and exits 0; with only the old key it reports the
// new log's checkpoints as badly signed and exits 3.
func TestLedgerVerifiedAcrossReplacedPC(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent twice with 190 movements")
	}
	r := newLineageRig(t)
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, []byte("ledger:\n  checkpoint_interval: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() *child {
		return startChild(t, r.bin, "--config", cfg, "--store-id", runStore, "--data-dir", r.dataDir, "--ingest", "127.0.0.1:0", "--nats", r.url)
	}
	published := func(n int64) func(*status.Status) bool {
		return func(s *status.Status) bool { return s.Ledger != nil && s.Ledger.Published == n && s.Ledger.Size == n }
	}

	c := start()
	r.submit(c, 150)
	first := r.waitStatus("a published checkpoint of 150 movements", published(150)).Ledger
	c.cmd.Process.Kill() // the PC dies
	<-c.exited
	if err := os.RemoveAll(r.dataDir); err != nil {
		t.Fatal(err)
	}
	c = start()
	r.submit(c, 40)
	second := r.waitStatus("a published checkpoint of the new PC's 40 movements", published(40)).Ledger
	r.stop(c)
	if second.PublicKey == first.PublicKey || second.Log == first.Log || second.First != 151 {
		t.Fatalf("the new PC's log %+v, the old one's %+v: want a new key and log from sequence 151", second, first)
	}

	verify := func(roster string) (int, audit.Report) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "roster")
		if err := os.WriteFile(f, []byte(roster), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(agentbin.BuildHQ(t), "verify", "--server", r.url, "--roster", f, "--store", runStore, "--no-ask", "--json").Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var rep audit.Report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("verify --json: %v\n%s", err, out)
		}
		return code, rep
	}
	code, rep := verify(fmt.Sprintf("%s %s\n%s %s\n", runStore, first.PublicKey, runStore, second.PublicKey))
	if code != 0 || !rep.OK() || len(rep.Logs) != 2 {
		t.Fatalf("verify with both keys: exit %d, %d logs, findings %+v", code, len(rep.Logs), rep.Findings)
	}
	for _, l := range rep.Logs {
		want := map[string]int64{first.Log: 150, second.Log: 40}[l.Log]
		if want == 0 || l.Latest != want || l.Leaves != want {
			t.Errorf("log %+v: want %d leaves checked up to its checkpoint", l, want)
		}
	}
	code, rep = verify(fmt.Sprintf("%s %s\n", runStore, first.PublicKey))
	if code != 3 || rep.OK() || rep.Counts[audit.KindUnverifiedCheckpoint] == 0 {
		t.Fatalf("verify without the new PC's key: exit %d, findings %+v", code, rep.Findings)
	}
}
