package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/internal/natstest"
	"github.com/rxedge/agent/settings"
)

// TestStatusExitCodes: 0 when all is well, 3 when something is quarantined
// or the oldest pending movement is older than --max-age, so monitoring
// systems can run `agent status`.
func TestStatusExitCodes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(file, []byte(enqueueLine("OK-1", 1)+"\n"), 0o600)
	mustCLI(t, "enqueue", "-f", file, "--data-dir", dir, "--store-id", cliStore)

	out, _, code := cli(t, "status", "--data-dir", dir)
	if code != 0 || strings.Contains(out, "Needs attention") {
		t.Fatalf("a fresh pending movement: exit %d\n%s", code, out)
	}
	time.Sleep(50 * time.Millisecond)
	out, _, code = cli(t, "status", "--data-dir", dir, "--max-age", "10ms")
	if code != exitAttention || !strings.Contains(out, "oldest pending movement is") {
		t.Fatalf("pending older than --max-age: exit %d\n%s", code, out)
	}

	qdir, _ := quarantinedDataDir(t, mv{id: "Q-1"})
	out, _, code = cli(t, "status", "--data-dir", qdir, "--json")
	if code != exitAttention || !strings.Contains(out, `"quarantined"`) {
		t.Fatalf("with a quarantined movement: exit %d\n%s", code, out)
	}
	out, _, code = cli(t, "status", "--data-dir", qdir)
	if code != exitAttention || !strings.Contains(out, "1 movement(s) quarantined") {
		t.Fatalf("with a quarantined movement: exit %d\n%s", code, out)
	}
}

// TestUnknownCommandsAreUsageErrors: a typo must not succeed in a script.
func TestUnknownCommandsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"dlq", "purg"}, {"remote", "bogus"}, {"status", "extra"}, {"version", "x"}, {"compact", "x"}} {
		if _, _, code := cli(t, args...); code != exitUsage {
			t.Errorf("agent %s: exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(file, []byte(enqueueLine("OK-1", 1)+"\n"), 0o600)
	mustCLI(t, "enqueue", "-f", file, "--data-dir", dir, "--store-id", cliStore)
	if _, errs, code := cli(t, "audit", "--action", "bogus", "--data-dir", dir); code != exitUsage || !strings.Contains(errs, "--action") {
		t.Errorf("audit --action bogus: exit %d %s", code, errs)
	}
	if out, _, code := cli(t, "dlq"); code != 0 || !strings.Contains(out, "redrive") {
		t.Errorf("agent dlq: exit %d\n%s", code, out)
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
	if code != exitAttention || !strings.Contains(out, "central has never been reached from this store: connection refused") || !strings.Contains(out, "from "+closed) {
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
		out, _, code := cli(t, append([]string{"status", "--data-dir", dir}, args...)...)
		if strings.Contains(out, want) {
			return out, code
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s, no %q in the status (exit %d):\n%s", want, code, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
