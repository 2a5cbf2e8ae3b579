//go:build unix

package service

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rxedge/agent/internal/disk"
)

// TestLoadSettingsRefusesAFIFO: a FIFO in hq.yaml's place is refused at
// once; reading it waited for a writer for ever, through a SIGTERM.
func TestLoadSettingsRefusesAFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hq.yaml")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := LoadSettings(p); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, disk.ErrNotRegular) {
			t.Errorf("LoadSettings of a FIFO: %v, want it refused as not a regular file", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("LoadSettings of a FIFO still waits after a minute")
	}
}
