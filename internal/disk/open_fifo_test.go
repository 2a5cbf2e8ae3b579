//go:build !windows

package disk

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestOpenFIFO: a FIFO opens at once, without a writer, and its
// descriptor says what it is.
func TestOpenFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		f, err := OpenNoFollow(fifo)
		if err == nil {
			var fi os.FileInfo
			if fi, err = f.Stat(); err == nil && fi.Mode().IsRegular() {
				err = errors.New("a FIFO's descriptor says it is a regular file")
			}
			f.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(time.Minute):
		// Let the open return, then fail.
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("opening a FIFO waited for a writer")
	}
}
