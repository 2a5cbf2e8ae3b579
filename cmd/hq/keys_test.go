package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/internal/cli"
)

// TestKeysOperator: the seed goes to a new file only its owner reads, the
// public key is printed alone on stdout and is the seed's, and the
// commands that sign load the file; an existing file is never
// overwritten, and --out is required.
func TestKeysOperator(t *testing.T) {
	path := filepath.Join(t.TempDir(), "operator.seed")
	stdout, stderr, code := runCLI(t, "keys", "operator", "--out", path)
	if code != 0 || !strings.Contains(stderr, "remote.operator_keys") {
		t.Fatalf("keys operator: exit %d\n%s%s", code, stdout, stderr)
	}
	pub := strings.TrimSpace(stdout)
	s, err := command.LoadSigner(path)
	if err != nil || s.PublicKey() != pub || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("the seed file: %v; its key %v, printed %q", err, s, stdout)
	}
	if fi, err := os.Stat(path); err != nil || runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("the seed file's mode: %v %v, want 0600", fi.Mode(), err)
	}
	before, _ := os.ReadFile(path)
	if _, stderr, code := runCLI(t, "keys", "operator", "--out", path); code != cli.ExitError || !strings.Contains(stderr, "never overwritten") {
		t.Errorf("over an existing file: exit %d %s", code, stderr)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("the existing seed file was changed")
	}
	if _, _, code := runCLI(t, "keys", "operator"); code != cli.ExitUsage {
		t.Errorf("without --out: exit %d, want %d", code, cli.ExitUsage)
	}
	if strings.Contains(stdout+stderr, string(before[:10])) {
		t.Error("the output shows the seed")
	}
}
