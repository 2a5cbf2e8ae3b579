package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/agentbin"
)

// TestStoppedStatusKeyPermissionDenied: a user who may read the data file
// but not the key file (0600, another owner) gets the status with
// ledger.error saying so, not a failure. Run as root, the built agent runs
// as nobody; otherwise the key is made unreadable to the test's user.
func TestStoppedStatusKeyPermissionDenied(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "data")
	os.Mkdir(dir, 0o755)
	keyFile := filepath.Join(dir, notary.KeyFileName)
	signedDataDir(t, dir, keyFile)
	var out []byte
	if os.Getuid() == 0 {
		// nobody must reach the binary, the data directory and the file.
		bin := filepath.Join(base, "agent")
		b, err := os.ReadFile(agentbin.Build(t))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(bin, b, 0o755)
		for _, p := range []string{filepath.Dir(base), base, dir} {
			os.Chmod(p, 0o755)
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Name() != notary.KeyFileName {
				os.Chmod(filepath.Join(dir, e.Name()), 0o644)
			}
		}
		cmd := exec.Command(bin, "status", "--json", "--data-dir", dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		cmd.Env = []string{"HOME=" + base}
		out, err = cmd.Output()
		if err != nil {
			var stderr string
			if e, ok := err.(*exec.ExitError); ok {
				stderr = string(e.Stderr)
			}
			t.Fatalf("status as nobody: %v\n%s\n%s", err, out, stderr)
		}
	} else {
		os.Chmod(keyFile, 0)
		out = []byte(mustCLI(t, "status", "--json", "--data-dir", dir))
	}
	var st status.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if st.Ledger == nil || st.Ledger.PublicKey != "" || !strings.Contains(st.Ledger.Error, "permission denied") || !strings.Contains(st.Ledger.Error, keyFile) {
		t.Fatalf("ledger %+v, want permission denied on %s", st.Ledger, keyFile)
	}
}
