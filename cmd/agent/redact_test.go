package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHeadOfficeCommandsHideThePassword runs every head-office command
// that reaches central, with a password in a server URL that does not
// parse (a bad host, an invalid % escape, a bad port), given by --server
// and by NATS_URL, and in a PostgreSQL URL or DSN that does not parse:
// each is a usage error (exit 2) at once, and the password is in neither
// stdout nor stderr. A monitoring URL with a password fails without
// showing it.
func TestHeadOfficeCommandsHideThePassword(t *testing.T) {
	const pw = "Pw-S3cret"
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir) // no nats CLI context of the machine's
	roster := filepath.Join(dir, "roster")
	if err := os.WriteFile(roster, []byte("S0001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	seed, _ := operatorSeed(t)
	witnessKey := filepath.Join(dir, "witness.key")
	mustCLI(t, "central", "witness-key", "--out", witnessKey)
	key := strings.Repeat("ab", 16)
	pg := "postgres://sink@127.0.0.1:1/rx"

	commands := [][]string{
		{"central", "verify", "--roster", roster, "--no-ask"},
		{"central", "verify", "--roster", roster, "--nkey", seed},
		{"central", "sink", "--until-caught-up", "--postgres", pg},
		{"central", "sink", "--verify", "--postgres", pg},
		{"central", "reconcile", "--no-ask"},
		{"central", "reconcile", "--nkey", seed},
		{"central", "durability"},
		{"provision"},
		{"central", "migrate", "--partitions", "2"},
		{"central", "prove", key},
		{"central", "witness", "--signing-key", witnessKey, "--state", filepath.Join(dir, "witness.state"), "--roster", roster, "--once"},
		{"remote", "status", "--fleet"},
		{"remote", "status", "--store", "S0001", "--nkey", seed},
		{"remote", "list", "--store", "S0001", "--nkey", seed},
		{"remote", "redrive", "--store", "S0001", "--all", "--reason-text", "test", "--nkey", seed},
	}
	servers := []struct{ name, url string }{
		{"bad host", "nats://ops:" + pw + "@[bad"},
		{"bad escape", "nats://ops:" + pw + "%zz@127.0.0.1:4222"},
		{"token and bad port", "nats://" + pw + "@127.0.0.1:port"},
		{"list with a bad one", "nats://127.0.0.1:4222, nats://ops:" + pw + "@[bad"},
		{"no scheme and bad escape", "ops:" + pw + "%zz@127.0.0.1:4222"},
	}
	check := func(t *testing.T, args []string, want int) {
		t.Helper()
		// A usage error comes at once; the bound only ends a command that
		// would wait for ever on what it cannot parse (the sink did).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out, errb bytes.Buffer
		code := exitCode(run(ctx, args, strings.NewReader(""), &out, &errb), &errb)
		stdout, stderr := out.String(), errb.String()
		if code != want {
			t.Errorf("exit %d, want %d\n%s%s", code, want, stdout, stderr)
		}
		if strings.Contains(stdout+stderr, "S3cret") || strings.Contains(stdout+stderr, "%zz") {
			t.Errorf("the output shows the password:\nstdout: %s\nstderr: %s", stdout, stderr)
		}
	}
	for _, server := range servers {
		for _, cmd := range commands {
			name := strings.Join(cmd[:min(2, len(cmd))], " ")
			t.Run(name+" --server "+server.name, func(t *testing.T) {
				check(t, append(append([]string{}, cmd...), "--server", server.url), exitUsage)
			})
			t.Run(name+" NATS_URL "+server.name, func(t *testing.T) {
				t.Setenv("NATS_URL", server.url)
				check(t, cmd, exitUsage)
			})
		}
	}

	for _, dsn := range []struct{ name, url string }{
		{"bad host", "postgres://sink:" + pw + "@[bad/rx"},
		{"bad escape", "postgres://sink:" + pw + "%zz@127.0.0.1/rx"},
		{"bad port", "postgres://sink:" + pw + "@127.0.0.1:99999/rx"},
		{"query password and bad sslmode", "postgres://sink@127.0.0.1/rx?password=" + pw + "&sslmode=bogus"},
		{"keywords and bad port", "host=127.0.0.1 password=" + pw + " port=notaport"},
		{"keywords and open quote", "host=127.0.0.1 password='" + pw},
		{"mistyped scheme", "postgress://sink:" + pw + "@127.0.0.1/rx"},
	} {
		for _, cmd := range [][]string{
			{"central", "sink", "--until-caught-up", "--server", "nats://127.0.0.1:1"},
			{"central", "sink", "--server", "nats://127.0.0.1:1"},
			{"central", "sink", "--verify", "--server", "nats://127.0.0.1:1"},
			{"central", "sink", "--migrate-only"},
			{"central", "report", "balances"},
		} {
			name := strings.Join(cmd[:3], " ")
			t.Run(name+" --postgres "+dsn.name, func(t *testing.T) {
				check(t, append(append([]string{}, cmd...), "--postgres", dsn.url), exitUsage)
			})
			t.Run(name+" RXEDGE_SINK_POSTGRES "+dsn.name, func(t *testing.T) {
				t.Setenv("RXEDGE_SINK_POSTGRES", dsn.url)
				check(t, cmd, exitUsage)
			})
		}
	}

	// A monitoring URL (central durability) is read, not parsed first: one
	// that does not parse is an error, and shows no password either.
	for _, u := range []string{"http://mon:" + pw + "@[bad", "http://mon:" + pw + "%zz@127.0.0.1:1", "http://mon:" + pw + "@127.0.0.1:1"} {
		t.Run("central durability --monitor-url "+strings.TrimPrefix(u, "http://mon:"+pw), func(t *testing.T) {
			check(t, []string{"central", "durability", "--monitor-url", u, "--timeout", "5s"}, exitError)
		})
	}
}
