package main

import (
	"strings"
	"testing"

	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestDurabilityCLI runs the durability check as the production
// template's system user: a single server fsyncing every write passes with
// a warning for its R1 stream; one that does not fails with exit 3 and the
// fix.
func TestDurabilityCLI(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noSync bool
		code   int
		want   []string
	}{
		{name: "sync always", code: cli.ExitOK, want: []string{"ok   server", "sync_interval: always", "warn stream RX_MOVEMENTS", "R1 on a single server", "fix: run central as a three-node cluster"}},
		{name: "no sync", noSync: true, code: cli.ExitAttention, want: []string{"FAIL server", "fsyncs only every 2m0s", "fix: set `sync_interval: always`"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.StartHub(t, natstest.WithConfigFile(productionTemplate, adminConnect...), func(o *hub.Options) { o.NoSync = tc.noSync })
			stdout, stderr, code := runCLI(t, "durability", "--server", srv.URL(), "--user", "sys", "--password", "CHANGE-ME-sys")
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, stdout)
				}
			}
		})
	}
	// A user outside the system account gets an error, not a report.
	srv := natstest.StartHub(t, natstest.WithConfigFile(productionTemplate, adminConnect...))
	_, stderr, code := runCLI(t, "durability", "--server", srv.URL(), "--user", "admin", "--password", "CHANGE-ME-admin", "--timeout", "1s")
	if code != cli.ExitError || !strings.Contains(stderr, "system account") {
		t.Errorf("as admin: exit %d, stderr %q", code, stderr)
	}
}
