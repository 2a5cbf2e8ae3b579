package daemon

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/settings"
)

// TestIngestPortInUseNamesTheFlag: an ingest address another program
// holds is refused with the flag that moves it.
func TestIngestPortInUseNamesTheFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	opts := settings.Options{StoreID: "S0042", DataDir: filepath.Join(t.TempDir(), "d"), IngestListen: ln.Addr().String()}
	err = Run(context.Background(), opts, nil, Hooks{})
	if err == nil || !strings.Contains(err.Error(), "--ingest HOST:PORT") {
		t.Fatalf("Run on a port in use: %v, want the --ingest hint", err)
	}
}

// TestListenerInUseLeavesANewDataDirAlone: a start refused because an
// address is taken (ingest, metrics or HL7) names the flag or setting
// that moves it, and leaves a new data directory as it was: not made, so
// no data file and no signing key in it.
func TestListenerInUseLeavesANewDataDirAlone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	for _, tc := range []struct {
		name string
		set  func(c *settings.Config)
		hint string
	}{
		{"ingest", func(c *settings.Config) { c.Ingest.Listen = taken }, "--ingest HOST:PORT"},
		{"metrics", func(c *settings.Config) { c.Metrics.Listen = taken }, "set another metrics.listen"},
		{"hl7", func(c *settings.Config) { c.Intake.HL7.Listen = taken }, "--hl7-listen HOST:PORT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "new")
			c := settings.Config{StoreID: "S0042", DataDir: dir}
			c.Ingest.Listen = "off"
			tc.set(&c)
			opts, err := c.Validate()
			if err != nil {
				t.Fatal(err)
			}
			err = Run(context.Background(), opts, nil, Hooks{})
			if err == nil || !strings.Contains(err.Error(), tc.hint) {
				t.Fatalf("Run with %s on a port in use: %v, want the hint %q", tc.name, err, tc.hint)
			}
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				entries, _ := os.ReadDir(dir)
				t.Errorf("the failed start made the data directory (%v), holding %v", err, entries)
			}
			if _, err := os.Stat(opts.Ledger.KeyFile); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the failed start made the signing key %s: %v", opts.Ledger.KeyFile, err)
			}
		})
	}
}

// TestSecondAgentOnTheSamePortsIsAlreadyRunning: a second agent with the
// first one's settings finds its ports taken before it reaches the data
// file's lock, and is told that the agent is already running.
func TestSecondAgentOnTheSamePortsIsAlreadyRunning(t *testing.T) {
	c := settings.Config{StoreID: "S0042", DataDir: t.TempDir()}
	c.Ingest.Listen = "127.0.0.1:0"
	opts, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts, nil, Hooks{Ready: func(addr string) { ready <- addr }}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the first agent: %v", err)
		}
	})
	select {
	case opts.IngestListen = <-ready:
	case err := <-done:
		t.Fatalf("the first agent did not start: %v", err)
	}
	if err := Run(context.Background(), opts, nil, Hooks{}); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("the second agent: %v, want ErrAlreadyRunning", err)
	}
}
