//go:build unix

package secret

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadFileRefusesAFIFO: a FIFO in place of the file is refused at
// once instead of waiting for a writer for ever.
func TestReadFileRefusesAFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO: %v", err)
	}
}
