package e2e

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/testkit/agentbin"
)

// TestSecondAgentExitsQuickly: a second `agent run` on the same data
// directory exits within 2 s, saying the agent is already running.
func TestSecondAgentExitsQuickly(t *testing.T) {
	dir := t.TempDir()
	startAgent(t, dir, agentbin.FreeAddr(t), nil)

	cmd := exec.Command(agentbin.Build(t), "run", "--store-id", "S0042", "--data-dir", dir, "--ingest", agentbin.FreeAddr(t))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err == nil {
		t.Fatal("the second agent ran")
	}
	if took > 2*time.Second {
		t.Fatalf("the second agent took %s to give up, want under 2s", took)
	}
	if !strings.Contains(stderr.String(), "already running") {
		t.Fatalf("the second agent said %q", stderr.String())
	}
	t.Logf("second agent exited after %s: %s", took.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
}
