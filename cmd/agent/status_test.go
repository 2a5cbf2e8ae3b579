package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
