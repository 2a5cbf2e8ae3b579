//go:build unix

package disk

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestReadRegular: a file within the limit is read; a FIFO, a directory
// and a file over the limit are refused at once, each with its error.
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	os.WriteFile(ok, []byte("12345"), 0o600)
	if b, err := ReadRegular(ok, 5); err != nil || string(b) != "12345" {
		t.Errorf("a file at the limit: %q, %v", b, err)
	}
	if _, err := ReadRegular(ok, 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a file over the limit: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRegular(fifo, 5); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a FIFO: %v", err)
	}
	if _, err := ReadRegular(dir, 5); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a directory: %v", err)
	}
	if _, err := ReadRegular(filepath.Join(dir, "missing"), 5); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}
