package main

import (
	"strings"
	"testing"

	"github.com/rxedge/agent/internal/cli"
)

// TestMovedCommands: each head-office spelling the store's binary had
// exits 2 saying where the command went, and repeats nothing else of the
// command line (a password, for one).
func TestMovedCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"central-config", "--roster", "r.txt", "--password", "Secret-1"}, "use rxedge-hq central-config,"},
		{[]string{"central", "migrate", "--password", "Secret-1", "--partitions", "2"}, "use rxedge-hq migrate,"},
		{[]string{"central", "sink", "--postgres", "postgres://u:Secret-1@db/rx"}, "use rxedge-hq sink,"},
		{[]string{"central", "report", "balances"}, "use rxedge-hq report,"},
		{[]string{"central", "durability", "--user", "sys", "--password", "Secret-1"}, "use rxedge-hq durability,"},
		{[]string{"provision", "--server", "nats://admin:Secret-1@central:4222"}, "use rxedge-hq provision,"},
		{[]string{"hub", "--store-dir", "d"}, "use rxedge-hq hub,"},
		{[]string{"central", "verify", "--roster", "r.txt", "--password", "Secret-1"}, "use rxedge-hq verify,"},
		{[]string{"central", "reconcile", "--nkey", "ops.seed"}, "use rxedge-hq reconcile,"},
		{[]string{"central", "witness-key", "--out", "w.key"}, "use rxedge-hq witness-key,"},
		{[]string{"central", "--password", "Secret-1", "verify"}, "use rxedge-hq … (see `rxedge-hq --help`)"},
		{[]string{"central"}, "use rxedge-hq … (see `rxedge-hq --help`)"},
		{[]string{"remote", "redrive", "--store", "S0042", "--all", "--password", "Secret-1"}, "use rxedge-hq remote redrive,"},
		{[]string{"remote", "Secret-1"}, "use rxedge-hq remote … (see `rxedge-hq --help`)"},
		{[]string{"verify-proof", "p.json", "--store-key", "k"}, "use rxedge-hq verify-proof,"},
	} {
		_, stderr, code := runCLI(t, tc.args...)
		if code != cli.ExitUsage || !strings.Contains(stderr, "moved: `agent "+tc.args[0]) || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "Secret-1") {
			t.Errorf("agent %s: exit %d\n%s\nwant exit 2 naming %q, without the password", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}
