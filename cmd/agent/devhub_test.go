package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/testkit/agentbin"
)

// TestDevHubAddress: the trial's hub listens where a hub does by default.
func TestDevHubAddress(t *testing.T) {
	if settings.DevHubListen != hub.DefaultListen {
		t.Errorf("settings.DevHubListen %q, hub.DefaultListen %q: the trial's documented address is the hub's", settings.DevHubListen, hub.DefaultListen)
	}
}

// TestRunDevWithoutTheDevHub: the production build (tag rxedge_nodev, as
// the packages build) has no embedded hub, and `run --dev` says so, and
// what to do instead, with a usage error before it creates anything.
func TestRunDevWithoutTheDevHub(t *testing.T) {
	bin := agentbin.BuildTagged(t, "agent", "rxedge_nodev")
	dir := t.TempDir()
	out, err := exec.Command(bin, "run", "--dev", "--data-dir", dir, "--ingest", "127.0.0.1:0").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitUsage || !strings.Contains(string(out), "no development hub") ||
		!strings.Contains(string(out), "rxedge-hq hub") || !strings.Contains(string(out), "go run ./cmd/agent run --dev") {
		t.Errorf("run --dev without the hub: %v\n%s\nwant exit 2 saying there is no development hub and what to run instead", err, out)
	}
}
