package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/daemon"
	"github.com/rxedge/agent/settings"
)

// runDaemon runs the agent in this process until the test ends and
// returns its ingest address ("" when it has none) once it is ready.
func runDaemon(t *testing.T, opts settings.Options, log *slog.Logger) string {
	t.Helper()
	if n := len(control.Endpoint(opts.DataDir)); n >= 104 {
		t.Skipf("the control socket's path in the temporary directory is %d bytes, over the limit of unix socket addresses", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, opts, log, daemon.Hooks{Ready: func(addr string) { ready <- addr }})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon.Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the agent did not stop within 15s")
		}
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		t.Fatalf("daemon.Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not become ready within 10s")
	}
	return ""
}

// localOptions are the options of an agent for dir with no ingest
// listener and no central.
func localOptions(t *testing.T, dir string) settings.Options {
	t.Helper()
	c := settings.Config{StoreID: cliStore, DataDir: dir}
	c.Ingest.Listen = "off"
	opts, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}
