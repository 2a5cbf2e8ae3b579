package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestStatusExitCodes: 0 when all is well, 3 when something is quarantined
// or the oldest pending movement is older than --max-age, so monitoring
// systems can run `agent status`.
func TestStatusExitCodes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(file, []byte(enqueueLine("OK-1", 1)+"\n"), 0o600)
	mustCLI(t, "enqueue", "-f", file, "--data-dir", dir, "--store-id", cliStore)

	out, _, code := runCLI(t, "status", "--data-dir", dir)
	if code != 0 || strings.Contains(out, "Needs attention") {
		t.Fatalf("a fresh pending movement: exit %d\n%s", code, out)
	}
	time.Sleep(50 * time.Millisecond)
	out, _, code = runCLI(t, "status", "--data-dir", dir, "--max-age", "10ms")
	if code != cli.ExitAttention || !strings.Contains(out, "oldest pending movement is") {
		t.Fatalf("pending older than --max-age: exit %d\n%s", code, out)
	}

	qdir, _ := quarantinedDataDir(t, mv{ID: "Q-1"})
	out, _, code = runCLI(t, "status", "--data-dir", qdir, "--json")
	if code != cli.ExitAttention || !strings.Contains(out, `"quarantined"`) {
		t.Fatalf("with a quarantined movement: exit %d\n%s", code, out)
	}
	out, _, code = runCLI(t, "status", "--data-dir", qdir)
	if code != cli.ExitAttention || !strings.Contains(out, "1 movement(s) quarantined") {
		t.Fatalf("with a quarantined movement: exit %d\n%s", code, out)
	}
}

// TestUnknownCommandsAreUsageErrors: a typo must not succeed in a script.
func TestUnknownCommandsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"dlq", "purg"}, {"remote", "bogus"}, {"status", "extra"}, {"version", "x"}, {"compact", "x"}} {
		if _, _, code := runCLI(t, args...); code != cli.ExitUsage {
			t.Errorf("agent %s: exit %d, want %d", strings.Join(args, " "), code, cli.ExitUsage)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(file, []byte(enqueueLine("OK-1", 1)+"\n"), 0o600)
	mustCLI(t, "enqueue", "-f", file, "--data-dir", dir, "--store-id", cliStore)
	if _, errs, code := runCLI(t, "audit", "--action", "bogus", "--data-dir", dir); code != cli.ExitUsage || !strings.Contains(errs, "--action") {
		t.Errorf("audit --action bogus: exit %d %s", code, errs)
	}
	if out, _, code := runCLI(t, "dlq"); code != 0 || !strings.Contains(out, "redrive") {
		t.Errorf("agent dlq: exit %d\n%s", code, out)
	}
}

// TestStatusCheck runs the monitoring mode against real data files: its
// exit code and its one line.
func TestStatusCheck(t *testing.T) {
	noDisk := []string{"--warn-free-disk", "0", "--crit-free-disk", "0"}
	stopped := t.TempDir()
	file := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(file, []byte(enqueueLine("OK-1", 1)+"\n"), 0o600)
	mustCLI(t, "enqueue", "-f", file, "--data-dir", stopped, "--store-id", cliStore)

	running := t.TempDir()
	runDaemon(t, localOptions(t, running), nil)

	qdir, _ := quarantinedDataDir(t, mv{ID: "Q-1"})

	tests := []struct {
		name   string
		args   []string
		code   int
		prefix string
	}{
		{"running", []string{"--data-dir", running}, 0, "RXEDGE OK - store " + cliStore + ", idle, 0 pending, 0 quarantined | pending=0;;;0; "},
		{"stopped", []string{"--data-dir", stopped}, 2, "RXEDGE CRITICAL - no agent is running for this data directory | pending=1;"},
		{"quarantined and stopped", []string{"--data-dir", qdir}, 2, "RXEDGE CRITICAL - no agent is running for this data directory; 1 movement(s) quarantined"},
		{"no data file", []string{"--data-dir", t.TempDir()}, 3, "RXEDGE UNKNOWN - cannot read the agent's status: no agent data file at "},
		{"which agent", []string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, 3, "RXEDGE UNKNOWN - cannot read the agent's status: configuration file "},
		{"free disk threshold", []string{"--data-dir", running, "--warn-free-disk", "1EiB"}, 0, ""},
		{"free disk below", []string{"--data-dir", running, "--warn-free-disk", "1000000TB", "--crit-free-disk", "0"}, 1, "RXEDGE WARNING - "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"status", "--check"}, tt.args...)
			if !strings.Contains(strings.Join(tt.args, " "), "free-disk") {
				args = append(args, noDisk...)
			}
			out, errs, code := runCLI(t, args...)
			if tt.name == "free disk threshold" {
				// EiB is not a unit: a usage error, which the plugin
				// contract answers UNKNOWN (3), one line on stdout.
				if code != status.CheckUnknown || !strings.HasPrefix(out, "RXEDGE UNKNOWN - usage: ") || strings.Count(out, "\n") != 1 {
					t.Errorf("got exit %d %q %q, want UNKNOWN for a usage error", code, out, errs)
				}
				return
			}
			if code != tt.code || !strings.HasPrefix(out, tt.prefix) || strings.Count(out, "\n") != 1 || errs != "" {
				t.Errorf("got exit %d\n%q\nstderr %q\nwant exit %d and a line starting %q", code, out, errs, tt.code, tt.prefix)
			}
		})
	}
}

// TestStatusJSONProblems: the document lists the problems judged, with
// stable codes, and the service as a state word.
func TestStatusJSONProblems(t *testing.T) {
	asServiceDataDir(t)
	qdir, _ := quarantinedDataDir(t, mv{ID: "Q-1"})
	out, _, code := runCLI(t, "status", "--json", "--data-dir", qdir)
	var st status.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if code != cli.ExitAttention || len(st.Judged) != 1 || st.Judged[0].Code != status.CodeQuarantined || st.Judged[0].Severity != status.SeverityWarning {
		t.Errorf("got exit %d, problems %+v; want 3 and one %q", code, st.Judged, status.CodeQuarantined)
	}
	if st.Service == nil || st.Service.State == "" || strings.Contains(st.Service.State, " ") {
		t.Errorf("service %+v is not a state word", st.Service)
	}
}

// cancelAfter cancels a context after n writes.
type cancelAfter struct {
	bytes.Buffer
	n      int
	cancel context.CancelFunc
}

func (w *cancelAfter) Write(p []byte) (int, error) {
	if w.n--; w.n == 0 {
		w.cancel()
	}
	return w.Buffer.Write(p)
}

// TestStatusWatchIntoAPipe: --watch --json writes one JSON document per
// refresh, and neither mode writes escape codes when stdout is no terminal.
func TestStatusWatchIntoAPipe(t *testing.T) {
	dir := t.TempDir()
	runDaemon(t, localOptions(t, dir), nil)
	for _, asJSON := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		w := &cancelAfter{n: 3, cancel: cancel}
		args := []string{"status", "--watch", "--interval", "1ms", "--data-dir", dir}
		if asJSON {
			args = append(args, "--json")
		}
		if err := run(ctx, args, strings.NewReader(""), w, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		out := w.String()
		if strings.Contains(out, "\x1b") {
			t.Errorf("%v wrote escape codes into a pipe: %q", args, out)
		}
		if !asJSON {
			if n := strings.Count(out, "Store       "+cliStore); n != 3 {
				t.Errorf("%v: %d views, want 3:\n%s", args, n, out)
			}
			continue
		}
		dec := json.NewDecoder(strings.NewReader(out))
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		for i := 0; i < 3; i++ {
			var st status.Status
			if err := dec.Decode(&st); err != nil || st.StoreID != cliStore {
				t.Fatalf("document %d: %v (store %q)\n%s", i, err, st.StoreID, out)
			}
		}
		if len(lines) != 3 {
			t.Errorf("%d lines, want one document per line:\n%s", len(lines), out)
		}
	}
}

// TestStatusNamesWhyCentralIsUnreachable: a new store that cannot reach
// central (here: nothing listens on the port) shows why and exits 3; a
// store that delivered before and loses central shows why too, but
// exits 0: its movements wait, which is the documented offline behaviour.
func TestStatusNamesWhyCentralIsUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "nats://" + l.Addr().String()
	l.Close()

	dir := t.TempDir()
	c := settings.Config{StoreID: cliStore, DataDir: dir}
	c.Ingest.Listen = "off"
	c.NATS.Servers = []string{closed}
	opts, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	runDaemon(t, opts, nil)
	out, code := waitStatus(t, dir, "offline: connection refused")
	if code != cli.ExitAttention || !strings.Contains(out, "cannot use central: refused") || !strings.Contains(out, "from "+closed) {
		t.Fatalf("a new store that cannot reach central: exit %d\n%s", code, out)
	}

	srv := natstest.StartHub(t)
	dir = t.TempDir()
	c = settings.Config{StoreID: cliStore, DataDir: dir}
	c.Ingest.Listen = "off"
	c.NATS.Servers = []string{srv.URL()}
	c.Sync.ResumeJitter = 10 * time.Millisecond
	if opts, err = c.Validate(); err != nil {
		t.Fatal(err)
	}
	runDaemon(t, opts, nil)
	file := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(file, []byte(enqueueLine("OK-1", 1)+"\n"), 0o600)
	mustCLI(t, "enqueue", "-f", file, "--data-dir", dir)
	waitStatus(t, dir, `"synced_total": 1`, "--json")
	srv.Stop()
	out, code = waitStatus(t, dir, "offline: connection refused")
	if code != 0 || strings.Contains(out, "Needs attention") {
		t.Fatalf("a store that delivered before, during an outage: exit %d\n%s", code, out)
	}
}

// waitStatus runs `agent status` until its output contains want.
func waitStatus(t *testing.T, dir, want string, args ...string) (string, int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _, code := runCLI(t, append([]string{"status", "--data-dir", dir}, args...)...)
		if strings.Contains(out, want) {
			return out, code
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s, no %q in the status (exit %d):\n%s", want, code, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStatusJSONAndCheckAgreeOnSeverity: a state has one severity whether
// `status --json` or `status --check` judges it, with the same thresholds.
func TestStatusJSONAndCheckAgreeOnSeverity(t *testing.T) {
	dir, _ := quarantinedDataDir(t, mv{ID: "POS-1", Reason: "permanent:too_large"}, mv{ID: "POS-2", Reason: "exhausted:timeout"})
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{nil, status.SeverityWarning},                                        // defaults: warning at 1, critical at 100
		{[]string{"--crit-quarantined", "2"}, status.SeverityCritical},       // the same flag for both
		{[]string{"--warn-quarantined", "3", "--crit-quarantined", "0"}, ""}, // below the warning: no problem
	} {
		out, _, code := runCLI(t, append([]string{"status", "--json", "--data-dir", dir}, tc.flags...)...)
		var st status.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		got := ""
		for _, p := range st.Judged {
			if p.Code == status.CodeQuarantined {
				got = p.Severity
			}
		}
		check, _, _ := runCLI(t, append([]string{"status", "--check", "--data-dir", dir}, tc.flags...)...)
		inCheck := strings.Contains(check, "2 movement(s) quarantined")
		if got != tc.want || inCheck != (tc.want != "") {
			t.Errorf("flags %v: --json severity %q (exit %d), --check line %q; want %q in both", tc.flags, got, code, check, tc.want)
		}
		if tc.want == status.SeverityCritical {
			// The check's own verdict for the same problem.
			if c, _ := status.Check(&st, nil, status.Thresholds{QuarantinedWarn: 1, QuarantinedCrit: 2}); c != status.CheckCritical {
				t.Errorf("status.Check says %d for the state --json called critical", c)
			}
		}
	}
}

// TestStatusCheckUsageIsUnknown: every usage error of `status --check` is
// the plugin contract's UNKNOWN: exit 3 and one line on stdout.
func TestStatusCheckUsageIsUnknown(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--check", "--bogus"},
		{"status", "--check", "extra-argument"},
		{"status", "--warn-quarantined", "x", "--check"},
	} {
		out, _, code := runCLI(t, args...)
		if code != status.CheckUnknown || !strings.HasPrefix(out, "RXEDGE UNKNOWN - usage: ") {
			t.Errorf("%v: exit %d, stdout %q; want 3 and an UNKNOWN line", args, code, out)
		}
	}
	// Without --check a usage error stays exit 2.
	if _, _, code := runCLI(t, "status", "--bogus"); code != cli.ExitUsage {
		t.Errorf("status --bogus: exit %d, want %d", code, cli.ExitUsage)
	}
}

// TestStatusOfATrialHasNoServiceNoise: for a data directory that is not
// the installed service's (a trial's, run --dev), status says nothing
// about a system service, and a stopped agent shows when it last synced
// (from its file), not "never".
func TestStatusOfATrialHasNoServiceNoise(t *testing.T) {
	dir := t.TempDir()
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: cliStore})
	if err != nil {
		t.Fatal(err)
	}
	p, es := movement.Prepare([]byte(`{"movement_id":"T-1","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`), cliStore, time.Now())
	if es != nil {
		t.Fatal(es)
	}
	if _, err := q.Enqueue([]movement.Prepared{p}); err != nil {
		t.Fatal(err)
	}
	l, _ := q.Lease(time.Now(), 1)
	if err := q.Settle(queue.Settlement{Acks: []queue.Ack{{Seq: l[0].Seq, StreamSeq: 1}}}); err != nil {
		t.Fatal(err)
	}
	q.Close()
	out, errs, code := runCLI(t, "status", "--data-dir", dir)
	if code != 0 || strings.Contains(out, "\nService") || strings.Contains(out+errs, "installer:") {
		t.Errorf("status of a trial: exit %d, mentions the service:\n%s%s", code, out, errs)
	}
	if strings.Contains(out, "never") {
		t.Errorf("a stopped agent that synced shows never:\n%s", out)
	}
	js, _, _ := runCLI(t, "status", "--json", "--data-dir", dir)
	var st status.Status
	if err := json.Unmarshal([]byte(js), &st); err != nil || st.Service != nil || st.Connection.LastSyncAt == nil {
		t.Errorf("status --json of a trial: service %+v, last sync %v (%v)", st.Service, st.Connection.LastSyncAt, err)
	}
}
