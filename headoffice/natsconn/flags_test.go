package natsconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		flags Flags
		env   env
		want  Settings
		err   string
	}{
		{name: "selected context", env: env{},
			want: Settings{Servers: Setting{"nats://ctx:4222", prodFrom}, User: Setting{"ctxuser", prodFrom}, Password: Setting{"ctxpass", prodFrom},
				CA: Setting{"/ctx/ca.pem", prodFrom}, Inbox: Setting{"_INBOX_ctx", prodFrom}}},
		{name: "environment over context", env: env{"NATS_URL": "nats://env:4222", "NATS_PASSWORD": "envpass"},
			want: Settings{Servers: Setting{"nats://env:4222", "NATS_URL"}, User: Setting{"ctxuser", prodFrom}, Password: Setting{"envpass", "NATS_PASSWORD"},
				CA: Setting{"/ctx/ca.pem", prodFrom}, Inbox: Setting{"_INBOX_ctx", prodFrom}}},
		{name: "flags over environment", flags: Flags{Values: Values{Servers: "nats://flag:4222", User: "ops"}}, env: env{"NATS_URL": "nats://env:4222", "RXEDGE_NATS_PASSWORD": "legacy"},
			want: Settings{Servers: Setting{"nats://flag:4222", "--server"}, User: Setting{"ops", "--user"}, Password: Setting{"legacy", "RXEDGE_NATS_PASSWORD"},
				CA: Setting{"/ctx/ca.pem", prodFrom}, Inbox: Setting{"_INBOX_ctx", prodFrom}}},
		{name: "an identity replaces the context's whole", env: env{"NATS_CREDS": "/env/ops.creds"},
			want: Settings{Servers: Setting{"nats://ctx:4222", prodFrom}, Creds: Setting{"/env/ops.creds", "NATS_CREDS"},
				CA: Setting{"/ctx/ca.pem", prodFrom}, Inbox: Setting{"_INBOX_ctx", prodFrom}}},
		{name: "--context", flags: Flags{Context: "creds"}, env: env{},
			want: Settings{Servers: Setting{"nats://creds:4222", `context "creds" (` + filepath.Join(xdg, "nats", "context", "creds.json") + `)`},
				Creds: Setting{"/ctx/ops.creds", `context "creds" (` + filepath.Join(xdg, "nats", "context", "creds.json") + `)`}}},
		{name: "NATS_CONTEXT", env: env{"NATS_CONTEXT": "creds"},
			want: Settings{Servers: Setting{"nats://creds:4222", `context "creds" (` + filepath.Join(xdg, "nats", "context", "creds.json") + `)`},
				Creds: Setting{"/ctx/ops.creds", `context "creds" (` + filepath.Join(xdg, "nats", "context", "creds.json") + `)`}}},
		{name: "user gives its inbox", flags: Flags{Context: "creds", Values: Values{User: "ops"}}, env: env{},
			want: Settings{Servers: Setting{"nats://creds:4222", `context "creds" (` + filepath.Join(xdg, "nats", "context", "creds.json") + `)`},
				User: Setting{"ops", "--user"}, Inbox: Setting{"_INBOX_ops", "the user (--user)"}}},
		{name: "two identities in one source", flags: Flags{Values: Values{User: "ops", Token: "t"}}, err: "choose one way to authenticate: --user, --token"},
		{name: "missing context", flags: Flags{Context: "nope"}, err: `nats context "nope" (--context) does not exist: no file ` + filepath.Join(xdg, "nats", "context", "nope.json")},
		{name: "not a name", flags: Flags{Context: "../etc"}, err: "is not a context name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := map[string]string{"XDG_CONFIG_HOME": xdg}
			for k, v := range tt.env {
				e[k] = v
			}
			f := tt.flags
			f.Getenv = func(k string) string { return e[k] }
			got, err := f.Settings()
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
