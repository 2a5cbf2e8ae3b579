package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/testkit/agenttest"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// serveRemote runs the control responder of the agent whose data
// directory is dir, on a connection with opts, until the test ends.
func serveRemote(t *testing.T, url, dir, storeID string, operatorKey string, opts ...nats.Option) {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: storeID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	r := remote.New(remote.Options{
		Queue: q, DLQ: dlq.New(q), StoreID: storeID, OperatorKeys: []string{operatorKey},
		Status: control.New(control.Options{Queue: q, StoreID: storeID}).Status,
	})
	nc := natstest.Connect(t, url, opts...)
	if err := r.Subscribe(nc); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestRemoteUsageErrors(t *testing.T) {
	seed, _ := ledgertest.OperatorFile(t)
	garbage := filepath.Join(t.TempDir(), "garbage.nk")
	if err := os.WriteFile(garbage, []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const srv = "nats://127.0.0.1:1"
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"status without a target", []string{"remote", "status", "--server", srv}, 2, "--store ID or --fleet"},
		{"status with both targets", []string{"remote", "status", "--store", "S1", "--fleet", "--server", srv}, 2, "not both"},
		{"status of a bad store id", []string{"remote", "status", "--store", "S1.>", "--server", srv}, 2, "--store"},
		{"status without a server", []string{"remote", "status", "--store", "S1"}, 2, "--server URL is required"},
		{"list without a store", []string{"remote", "list", "--server", srv}, 2, "--store ID is required"},
		{"list over the limit", []string{"remote", "list", "--store", "S1", "--limit", "5000", "--server", srv}, 2, "--limit"},
		{"redrive without keys", []string{"remote", "redrive", "--store", "S1", "--reason-text", "x", "--nkey", seed, "--server", srv}, 2, "or --all"},
		{"redrive with keys and --all", []string{"remote", "redrive", "--store", "S1", "k", "--all", "--reason-text", "x", "--nkey", seed, "--server", srv}, 2, "not both"},
		{"redrive without a reason", []string{"remote", "redrive", "--store", "S1", "--all", "--nkey", seed, "--server", srv}, 2, "--reason-text"},
		{"redrive without a key", []string{"remote", "redrive", "--store", "S1", "--all", "--reason-text", "x", "--server", srv}, 2, "--nkey"},
		{"redrive valid too long", []string{"remote", "redrive", "--store", "S1", "--all", "--reason-text", "x", "--nkey", seed, "--valid-for", "10m", "--server", srv}, 2, "--valid-for"},
		{"redrive with a long spread", []string{"remote", "redrive", "--store", "S1", "--all", "--reason-text", "x", "--nkey", seed, "--spread", "48h", "--server", srv}, 2, "--spread"},
		{"redrive with a missing seed file", []string{"remote", "redrive", "--store", "S1", "--all", "--reason-text", "x", "--nkey", filepath.Join(t.TempDir(), "none"), "--server", srv}, 1, "--nkey"},
		{"redrive with a bad seed file", []string{"remote", "redrive", "--store", "S1", "--all", "--reason-text", "x", "--nkey", garbage, "--server", srv}, 1, "not an NKey user seed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q (stdout %q)", code, stderr, tc.code, tc.want, stdout)
			}
		})
	}
}

// TestRemoteStatusExitCodes: exit 3 when a store needs attention, so that
// monitoring can run `hq remote status`.
func TestRemoteStatusExitCodes(t *testing.T) {
	h := natstest.StartHub(t)
	quarantined, _ := agenttest.Quarantined(t, cliStore, agenttest.Movement{ID: "A"})
	seed, pub := ledgertest.OperatorFile(t)
	serveRemote(t, h.URL(), quarantined, cliStore, pub)
	// A second store, with nothing quarantined.
	clean := t.TempDir()
	serveRemote(t, h.URL(), clean, "S0043", pub)

	if stdout, stderr, code := runCLI(t, "remote", "status", "--store", cliStore, "--nkey", seed, "--server", h.URL()); code != cli.ExitAttention || !strings.Contains(stdout, "Needs attention") {
		t.Errorf("status of a store with a quarantine: exit %d, want 3\n%s%s", code, stdout, stderr)
	}
	if stdout, stderr, code := runCLI(t, "remote", "status", "--store", "S0043", "--nkey", seed, "--server", h.URL()); code != cli.ExitOK || !strings.Contains(stdout, "Store       S0043") {
		t.Errorf("status of a clean store: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := runCLI(t, "remote", "status", "--store", "S0099", "--nkey", seed, "--server", h.URL()); code != cli.ExitError || !strings.Contains(stderr, "no agent answers") {
		t.Errorf("status of an absent store: exit %d, want 1\n%s", code, stderr)
	}
}

// TestRemoteAsTheOperatorUser runs the CLI as the production template's
// operator: with --user ops its inbox prefix defaults to _INBOX_ops, the
// only one the server lets it read.
func TestRemoteAsTheOperatorUser(t *testing.T) {
	h := natstest.StartHub(t, natstest.WithConfigFile(filepath.Join("..", "..", "configs", "nats", "production.conf.template"),
		nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")))
	seed, pub := ledgertest.OperatorFile(t)
	serveRemote(t, h.URL(), t.TempDir(), "S0001", pub, nats.UserInfo("S0001", "CHANGE-ME-S0001"), nats.CustomInboxPrefix("_INBOX_S0001"))

	ops := []string{"--nkey", seed, "--server", h.URL(), "--user", "ops", "--password", "CHANGE-ME-ops", "--wait", "2s"}
	if stdout, stderr, code := runCLI(t, append([]string{"remote", "status", "--store", "S0001"}, ops...)...); code != cli.ExitOK || !strings.Contains(stdout, "Store       S0001") {
		t.Errorf("status as ops: exit %d\n%s%s", code, stdout, stderr)
	}
	// With the default inbox the answer has nowhere to go.
	args := append([]string{"remote", "status", "--store", "S0001", "--inbox-prefix", "_INBOX"}, ops...)
	args[len(args)-1] = "500ms"
	if _, stderr, code := runCLI(t, args...); code != cli.ExitError || !strings.Contains(stderr, "did not answer") {
		t.Errorf("status as ops with the default inbox: exit %d, want 1 and a timeout\n%s", code, stderr)
	}
}

// writeContext writes a nats CLI context under dir/nats and, when
// selected, selects it as the nats CLI does.
func writeContext(t *testing.T, dir, name, body string, selected bool) string {
	t.Helper()
	ctxDir := filepath.Join(dir, "nats", "context")
	if err := os.MkdirAll(ctxDir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(ctxDir, name+".json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if selected {
		if err := os.WriteFile(filepath.Join(dir, "nats", "context.txt"), []byte(name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestRemoteWithANATSContext: head office's nats CLI context is enough to
// run `hq remote`; a wrong password in it says where it came from and
// never prints it.
func TestRemoteWithANATSContext(t *testing.T) {
	h := natstest.StartHub(t, natstest.WithConfigFile(filepath.Join("..", "..", "configs", "nats", "production.conf.template"),
		nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")))
	seed, pub := ledgertest.OperatorFile(t)
	serveRemote(t, h.URL(), t.TempDir(), "S0001", pub, nats.UserInfo("S0001", "CHANGE-ME-S0001"), nats.CustomInboxPrefix("_INBOX_S0001"))

	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	writeContext(t, xdg, "central", `{"url":"`+h.URL()+`","user":"ops","password":"CHANGE-ME-ops"}`, true)
	wrong := writeContext(t, xdg, "wrong", `{"url":"`+h.URL()+`","user":"ops","password":"Secret-Not-This-1"}`, false)

	if stdout, stderr, code := runCLI(t, "remote", "status", "--store", "S0001", "--nkey", seed, "--wait", "2s"); code != cli.ExitOK || !strings.Contains(stdout, "Store       S0001") {
		t.Errorf("status with the selected context: exit %d\n%s%s", code, stdout, stderr)
	}
	_, stderr, code := runCLI(t, "remote", "status", "--store", "S0001", "--nkey", seed, "--wait", "2s", "--context", "wrong")
	if code != cli.ExitError || !strings.Contains(stderr, `user "ops" from context "wrong" (`+wrong+`)`) || !strings.Contains(stderr, "password from context") ||
		!strings.Contains(strings.ToLower(stderr), "authorization") {
		t.Errorf("wrong password: exit %d\n%s", code, stderr)
	}
	if strings.Contains(stderr, "Secret-Not-This-1") {
		t.Errorf("the error prints the password:\n%s", stderr)
	}
	// Credentials in the server URL are the identity (nats.go is given
	// the URL without them, and the user's inbox prefix follows); a wrong
	// one is refused without being shown.
	withCreds := strings.Replace(h.URL(), "nats://", "nats://ops:CHANGE-ME-ops@", 1)
	if stdout, stderr, code := runCLI(t, "remote", "status", "--store", "S0001", "--nkey", seed, "--wait", "2s", "--server", withCreds); code != cli.ExitOK {
		t.Errorf("credentials in the URL: exit %d\n%s%s", code, stdout, stderr)
	}
	wrongURL := strings.Replace(h.URL(), "nats://", "nats://ops:Secret-Not-This-2@", 1)
	_, stderr, code = runCLI(t, "remote", "status", "--store", "S0001", "--nkey", seed, "--wait", "2s", "--server", wrongURL)
	if code != cli.ExitError || strings.Contains(stderr, "Secret-Not-This-2") || !strings.Contains(stderr, `user "ops" from the server URL (--server)`) {
		t.Errorf("a wrong password in the URL: exit %d\n%s", code, stderr)
	}
	// A flag wins over the context.
	t.Setenv("NATS_PASSWORD", "CHANGE-ME-ops")
	if stdout, stderr, code := runCLI(t, "remote", "status", "--store", "S0001", "--nkey", seed, "--wait", "2s", "--context", "wrong"); code != cli.ExitOK {
		t.Errorf("NATS_PASSWORD over the context's: exit %d\n%s%s", code, stdout, stderr)
	}
}
