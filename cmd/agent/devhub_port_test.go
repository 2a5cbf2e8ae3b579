//go:build !rxedge_nodev

package main

import (
	"net"
	"strings"
	"testing"
)

// TestRunDevHubPortInUseNamesTheFlag: a trial whose hub address another
// program holds is refused with the flag that moves it.
func TestRunDevHubPortInUseNamesTheFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, stderr, code := runCLI(t, "run", "--dev", "--dev-hub", ln.Addr().String(), "--data-dir", t.TempDir(), "--ingest", "127.0.0.1:0")
	if code == 0 || !strings.Contains(stderr, "--dev-hub 127.0.0.1:4223") {
		t.Errorf("exit %d, stderr %q; want a refusal naming --dev-hub", code, stderr)
	}
}
