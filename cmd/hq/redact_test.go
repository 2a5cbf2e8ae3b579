package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/testkit/ledgertest"
)

// hiddenPassword is the password the tests below put where a user could,
// and then look for in what the commands print.
const hiddenPassword = "Pw-S3cret"

// runHidesPassword runs the command line args through run, as main does,
// and checks its exit code and that neither stdout nor stderr shows
// hiddenPassword, or the invalid escape that follows it in some cases.
func runHidesPassword(t *testing.T, args []string, want int) {
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

// headOfficeCommands are the command lines of every head-office command
// that reaches central, but for the server, with what each needs before
// it connects (files in dir).
func headOfficeCommands(t *testing.T, dir string) [][]string {
	t.Helper()
	roster := filepath.Join(dir, "roster")
	if err := os.WriteFile(roster, []byte("S0001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	seed, _ := ledgertest.OperatorFile(t)
	witnessKey := filepath.Join(dir, "witness.key")
	mustCLI(t, "witness-key", "--out", witnessKey)
	pg := "postgres://sink@127.0.0.1:1/rx"
	return [][]string{
		{"verify", "--roster", roster, "--no-ask"},
		{"verify", "--roster", roster, "--nkey", seed},
		{"sink", "--until-caught-up", "--postgres", pg},
		{"sink", "--verify", "--postgres", pg},
		{"reconcile", "--no-ask"},
		{"reconcile", "--nkey", seed},
		{"durability"},
		{"provision"},
		{"migrate", "--partitions", "2"},
		{"prove", strings.Repeat("ab", 16)},
		{"witness", "--signing-key", witnessKey, "--state", filepath.Join(dir, "witness.state"), "--roster", roster, "--once"},
		{"remote", "status", "--fleet"},
		{"remote", "status", "--store", "S0001", "--nkey", seed},
		{"remote", "list", "--store", "S0001", "--nkey", seed},
		{"remote", "redrive", "--store", "S0001", "--all", "--reason-text", "test", "--nkey", seed},
	}
}

// TestHeadOfficeCommandsHideThePassword runs every head-office command
// that reaches central with a password in a server URL that does not
// parse (a bad host, an invalid % escape, a bad port, one bad URL of a
// list, no scheme, a user and password with no host), given by --server
// and by NATS_URL: each is a usage
// error (exit 2) at once, and the password is in neither stdout nor
// stderr. TestSinkHidesThePostgresPassword does the same for the
// database's URL.
func TestHeadOfficeCommandsHideThePassword(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir) // no nats CLI context of the machine's
	servers := []struct{ name, url string }{
		{"bad host", "nats://ops:" + hiddenPassword + "@[bad"},
		{"bad escape", "nats://ops:" + hiddenPassword + "%zz@127.0.0.1:4222"},
		{"token and bad port", "nats://" + hiddenPassword + "@127.0.0.1:port"},
		{"list with a bad one", "nats://127.0.0.1:4222, nats://ops:" + hiddenPassword + "@[bad"},
		{"no scheme and bad escape", "ops:" + hiddenPassword + "%zz@127.0.0.1:4222"},
		{"no host", "nats://ops:" + hiddenPassword},
		{"no host, a slash in the password", "nats://ops:" + hiddenPassword + "/x"},
	}
	for _, cmd := range headOfficeCommands(t, dir) {
		name := strings.Join(cmd[:min(2, len(cmd))], " ")
		for _, server := range servers {
			t.Run(name+" --server "+server.name, func(t *testing.T) {
				runHidesPassword(t, append(append([]string{}, cmd...), "--server", server.url), cli.ExitUsage)
			})
			t.Run(name+" NATS_URL "+server.name, func(t *testing.T) {
				t.Setenv("NATS_URL", server.url)
				runHidesPassword(t, cmd, cli.ExitUsage)
			})
		}
	}
	// A monitoring URL (hq durability) is read, not parsed first: one
	// that does not parse is an error, and shows no password either.
	for _, u := range []string{"http://mon:" + hiddenPassword + "@[bad", "http://mon:" + hiddenPassword + "%zz@127.0.0.1:1", "http://mon:" + hiddenPassword + "@127.0.0.1:1", "http://mon:" + hiddenPassword} {
		t.Run("durability --monitor-url "+strings.TrimPrefix(u, "http://mon:"+hiddenPassword), func(t *testing.T) {
			runHidesPassword(t, []string{"durability", "--monitor-url", u, "--timeout", "5s"}, cli.ExitError)
		})
	}
}

// TestSinkHidesThePostgresPassword runs the sink in each of its modes, and
// the report, with a password in a PostgreSQL URL or key=value string
// that pgx cannot read, by --postgres and by RXEDGE_SINK_POSTGRES: each is
// a usage error (exit 2) at once, even for a sink that would wait for its
// database, and the password is in neither stdout nor stderr.
func TestSinkHidesThePostgresPassword(t *testing.T) {
	pw := hiddenPassword
	for _, dsn := range []struct{ name, url string }{
		{"bad host", "postgres://sink:" + pw + "@[bad/rx"},
		{"bad escape", "postgres://sink:" + pw + "%zz@127.0.0.1/rx"},
		{"bad port", "postgres://sink:" + pw + "@127.0.0.1:99999/rx"},
		{"query password and bad sslmode", "postgres://sink@127.0.0.1/rx?password=" + pw + "&sslmode=bogus"},
		{"keywords and bad port", "host=127.0.0.1 password=" + pw + " port=notaport"},
		{"keywords and open quote", "host=127.0.0.1 password='" + pw},
		{"mistyped scheme", "postgress://sink:" + pw + "@127.0.0.1/rx"},
		{"an at in the password", "postgres://sink:Pw@S3cret@127.0.0.1/rx"},
		{"upper-case scheme", "POSTGRES://sink:Pw=S3cret@127.0.0.1/rx"},
		{"an at in a query password", "postgres://127.0.0.1/rx?password=Pw@S3cret&sslmode=bogus"},
	} {
		for _, cmd := range [][]string{
			{"sink", "--until-caught-up", "--server", "nats://127.0.0.1:1"},
			{"sink", "--server", "nats://127.0.0.1:1"},
			{"sink", "--verify", "--server", "nats://127.0.0.1:1"},
			{"sink", "--migrate-only"},
			{"report", "balances"},
		} {
			name := strings.Join(cmd[:min(2, len(cmd))], " ")
			t.Run(name+" --postgres "+dsn.name, func(t *testing.T) {
				runHidesPassword(t, append(append([]string{}, cmd...), "--postgres", dsn.url), cli.ExitUsage)
			})
			t.Run(name+" RXEDGE_SINK_POSTGRES "+dsn.name, func(t *testing.T) {
				t.Setenv("RXEDGE_SINK_POSTGRES", dsn.url)
				runHidesPassword(t, cmd, cli.ExitUsage)
			})
		}
	}
}
