//go:build unix

package notary_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rxedge/agent/notary"
)

// TestKeyFileFIFOIsRefused: a named pipe in the key file's place is
// refused at once: reading it would wait for a writer forever.
func TestKeyFileFIFOIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), notary.KeyFileName)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := notary.LoadKey(path, store); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("LoadKey of a pipe: %v", err)
	}
	q := openQueue(t)
	newNotary(t, q, path).PrepareKey()
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the pipe was replaced: %v", err)
	}
}
