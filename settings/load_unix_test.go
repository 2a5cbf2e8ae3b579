//go:build unix

package settings

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rxedge/agent/internal/disk"
)

// TestLoadFileRefusesAFIFO: a FIFO in the settings file's place is
// refused at once; reading it would wait for a writer for ever (and the
// service could not be stopped while it waited).
func TestLoadFileRefusesAFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.yaml")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := LoadFile(p); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, disk.ErrNotRegular) {
			t.Errorf("LoadFile of a FIFO: %v, want it refused as not a regular file", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("LoadFile of a FIFO still waits after a minute")
	}
}
