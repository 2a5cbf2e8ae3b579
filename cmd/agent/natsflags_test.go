package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/testkit/natstest"
)

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

// TestNATSSettingsPrecedence: flags win over the environment, the
// environment over the context; the credentials come as one from the first
// source that names an identity; every value says where it came from.
func TestNATSSettingsPrecedence(t *testing.T) {
	xdg := t.TempDir()
	prod := writeContext(t, xdg, "prod", `{"url":"nats://ctx:4222","user":"ctxuser","password":"ctxpass","ca":"/ctx/ca.pem","inbox_prefix":"_INBOX_ctx"}`, true)
	writeContext(t, xdg, "creds", `{"url":"nats://creds:4222","creds":"/ctx/ops.creds"}`, false)
	prodFrom := `context "prod" (` + prod + `)`

	type env map[string]string
	tests := []struct {
		name  string
		flags natsFlags
		env   env
		want  natsSettings
		err   string
	}{
		{name: "selected context", env: env{},
			want: natsSettings{servers: setting{"nats://ctx:4222", prodFrom}, user: setting{"ctxuser", prodFrom}, password: setting{"ctxpass", prodFrom},
				ca: setting{"/ctx/ca.pem", prodFrom}, inbox: setting{"_INBOX_ctx", prodFrom}}},
		{name: "environment over context", env: env{"NATS_URL": "nats://env:4222", "NATS_PASSWORD": "envpass"},
			want: natsSettings{servers: setting{"nats://env:4222", "NATS_URL"}, user: setting{"ctxuser", prodFrom}, password: setting{"envpass", "NATS_PASSWORD"},
				ca: setting{"/ctx/ca.pem", prodFrom}, inbox: setting{"_INBOX_ctx", prodFrom}}},
		{name: "flags over environment", flags: natsFlags{server: "nats://flag:4222", user: "ops"}, env: env{"NATS_URL": "nats://env:4222", "RXEDGE_NATS_PASSWORD": "legacy"},
			want: natsSettings{servers: setting{"nats://flag:4222", "--server"}, user: setting{"ops", "--user"}, password: setting{"legacy", "RXEDGE_NATS_PASSWORD"},
				ca: setting{"/ctx/ca.pem", prodFrom}, inbox: setting{"_INBOX_ctx", prodFrom}}},
		{name: "an identity replaces the context's whole", env: env{"NATS_CREDS": "/env/ops.creds"},
			want: natsSettings{servers: setting{"nats://ctx:4222", prodFrom}, creds: setting{"/env/ops.creds", "NATS_CREDS"},
				ca: setting{"/ctx/ca.pem", prodFrom}, inbox: setting{"_INBOX_ctx", prodFrom}}},
		{name: "--context", flags: natsFlags{context: "creds"}, env: env{},
			want: natsSettings{servers: setting{"nats://creds:4222", `context "creds" (` + filepath.Join(xdg, "nats", "context", "creds.json") + `)`},
				creds: setting{"/ctx/ops.creds", `context "creds" (` + filepath.Join(xdg, "nats", "context", "creds.json") + `)`}}},
		{name: "NATS_CONTEXT", env: env{"NATS_CONTEXT": "creds"},
			want: natsSettings{servers: setting{"nats://creds:4222", `context "creds" (` + filepath.Join(xdg, "nats", "context", "creds.json") + `)`},
				creds: setting{"/ctx/ops.creds", `context "creds" (` + filepath.Join(xdg, "nats", "context", "creds.json") + `)`}}},
		{name: "user gives its inbox", flags: natsFlags{context: "creds", user: "ops"}, env: env{},
			want: natsSettings{servers: setting{"nats://creds:4222", `context "creds" (` + filepath.Join(xdg, "nats", "context", "creds.json") + `)`},
				user: setting{"ops", "--user"}, inbox: setting{"_INBOX_ops", "the user (--user)"}}},
		{name: "two identities in one source", flags: natsFlags{user: "ops", token: "t"}, err: "choose one way to authenticate: --user, --token"},
		{name: "missing context", flags: natsFlags{context: "nope"}, err: `nats context "nope" (--context) does not exist: no file ` + filepath.Join(xdg, "nats", "context", "nope.json")},
		{name: "not a name", flags: natsFlags{context: "../etc"}, err: "is not a context name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := map[string]string{"XDG_CONFIG_HOME": xdg}
			for k, v := range tt.env {
				e[k] = v
			}
			f := tt.flags
			f.getenv = func(k string) string { return e[k] }
			got, err := f.resolve()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestRemoteWithANATSContext: head office's nats CLI context is enough to
// run `agent remote`; a wrong password in it says where it came from and
// never prints it.
func TestRemoteWithANATSContext(t *testing.T) {
	h := natstest.StartHub(t, natstest.WithConfigFile(filepath.Join("..", "..", "configs", "nats", "production.conf.template"),
		nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")))
	seed, pub := operatorSeed(t)
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
