package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/internal/cli"
)

func TestCentralConfig(t *testing.T) {
	roster := filepath.Join(t.TempDir(), "roster")
	if err := os.WriteFile(roster, []byte("S0001\nS0002\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{name: "one partition is the template's layout", args: []string{"--roster", roster},
			contains: []string{`{ service: { account: RX, subject: "rx.mv.S0001.>" } }`, `"$JS.API.STREAM.CREATE.RX_ARCHIVE"`}},
		{name: "four partitions map the store's subjects onto its own", args: []string{"--roster", roster, "--partitions", "4"},
			contains: []string{
				`{ service: { account: RX, subject: "rx.mvp.1.S0001.>" }, to: "rx.mv.S0001.>" }`,
				`{ service: { account: RX, subject: "$JS.API.DIRECT.GET.RX_MOVEMENTS_1.rx.mvp.1.S0001.>" }, to: "$JS.API.DIRECT.GET.RX_MOVEMENTS.rx.mv.S0001.>" }`,
				`{ service: "rx.mvp.0.S0002.>", accounts: [S0002] }`,
				`"$JS.API.STREAM.UPDATE.RX_ARCHIVE_3"`,
			}},
		{name: "no partitions", args: []string{"--roster", roster, "--partitions", "0"}, code: cli.ExitUsage},
		{name: "too many partitions", args: []string{"--roster", roster, "--partitions", "65"}, code: cli.ExitUsage},
	}
	for _, tc := range tests {
		stdout, stderr, code := runCLI(t, append([]string{"central-config"}, tc.args...)...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d\nstderr: %s", tc.name, code, tc.code, stderr)
		}
		for _, want := range tc.contains {
			if !strings.Contains(stdout, want) {
				t.Errorf("%s: the configuration has no %s", tc.name, want)
			}
		}
	}
}
