package natsconn

import (
	"errors"
	"strings"
	"testing"
)

func layer(name string, v Values) *Layer {
	return &Layer{Values: v, From: func(field string) string { return name + "." + field }}
}

func TestResolve(t *testing.T) {
	for _, tt := range []struct {
		name   string
		layers []*Layer
		want   Settings
		err    bool
	}{
		{name: "first layer wins each setting",
			layers: []*Layer{layer("a", Values{Servers: "nats://a"}), layer("b", Values{Servers: "nats://b", CA: "b.pem"})},
			want:   Settings{Servers: Setting{"nats://a", "a.servers"}, CA: Setting{"b.pem", "b.ca"}}},
		{name: "credentials come as one",
			layers: []*Layer{layer("a", Values{Creds: "a.creds"}), layer("b", Values{User: "u", Password: "p"})},
			want:   Settings{Creds: Setting{"a.creds", "a.creds"}}},
		{name: "the second layer's password serves a user below it",
			layers: []*Layer{layer("a", Values{}), layer("env", Values{Password: "envpw"}), layer("ctx", Values{User: "u", Password: "ctxpw"})},
			want: Settings{User: Setting{"u", "ctx.user"}, Password: Setting{"envpw", "env.password"},
				Inbox: Setting{"_INBOX_u", "the user (ctx.user)"}}},
		{name: "a third layer's password does not serve a user above it",
			layers: []*Layer{layer("a", Values{User: "u"}), layer("env", Values{}), layer("ctx", Values{Password: "ctxpw"})},
			want:   Settings{User: Setting{"u", "a.user"}, Inbox: Setting{"_INBOX_u", "the user (a.user)"}}},
		{name: "two identities in one layer", layers: []*Layer{layer("a", Values{User: "u", Token: "t"})}, err: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.layers...)
			if tt.err {
				if !errors.Is(err, ErrSetting) {
					t.Fatalf("got %v, want an ErrSetting", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got  %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
}

func TestContextNames(t *testing.T) {
	env := map[string]string{"XDG_CONFIG_HOME": t.TempDir()}
	getenv := func(k string) string { return env[k] }
	if l, err := Context("", "--context", getenv); l != nil || err != nil {
		t.Errorf("nothing named or selected: %v, %v", l, err)
	}
	for _, name := range []string{"../etc", `a\b`, "nope"} {
		if _, err := Context(name, "--context", getenv); !errors.Is(err, ErrSetting) {
			t.Errorf("context %q: got %v, want an ErrSetting", name, err)
		}
	}
}

// TestServerURLCredentials: the servers come out of Resolve without
// credentials; the URL's are the identity when no source names one; a URL
// that does not parse is an ErrSetting that shows no piece of the password.
func TestServerURLCredentials(t *testing.T) {
	for _, tt := range []struct {
		name   string
		layers []*Layer
		want   Settings
	}{
		{name: "user and password in the URL",
			layers: []*Layer{layer("a", Values{Servers: "nats://ops:pw@h1:4222, nats://ops:pw@h2:4222"})},
			want: Settings{Servers: Setting{"nats://h1:4222,nats://h2:4222", "a.servers"}, User: Setting{"ops", "the server URL (a.servers)"},
				Password: Setting{"pw", "the server URL (a.servers)"}, Inbox: Setting{"_INBOX_ops", "the user (the server URL (a.servers))"}}},
		{name: "a token in a URL without a scheme",
			layers: []*Layer{layer("a", Values{Servers: "tok@h1:4222"})},
			want:   Settings{Servers: Setting{"h1:4222", "a.servers"}, Token: Setting{"tok", "the server URL (a.servers)"}}},
		{name: "a websocket URL keeps its path",
			layers: []*Layer{layer("a", Values{Servers: "wss://h:443/nats"})},
			want:   Settings{Servers: Setting{"wss://h:443/nats", "a.servers"}}},
		{name: "the URL's identity wins over a lower layer's",
			layers: []*Layer{layer("a", Values{Servers: "nats://u:pw@h:4222"}), layer("env", Values{Creds: "ops.creds"})},
			want: Settings{Servers: Setting{"nats://h:4222", "a.servers"}, User: Setting{"u", "the server URL (a.servers)"},
				Password: Setting{"pw", "the server URL (a.servers)"}, Inbox: Setting{"_INBOX_u", "the user (the server URL (a.servers))"}}},
		{name: "a higher layer's identity wins over the URL's",
			layers: []*Layer{layer("a", Values{Creds: "ops.creds"}), layer("env", Values{Servers: "nats://u:pw@h:4222"})},
			want:   Settings{Servers: Setting{"nats://h:4222", "env.servers"}, Creds: Setting{"ops.creds", "a.creds"}}},
		{name: "the layer's own identity wins over its URL's",
			layers: []*Layer{layer("a", Values{Servers: "nats://u:pw@h:4222", User: "sys"})},
			want:   Settings{Servers: Setting{"nats://h:4222", "a.servers"}, User: Setting{"sys", "a.user"}, Inbox: Setting{"_INBOX_sys", "the user (a.user)"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.layers...)
			if err != nil || got != tt.want {
				t.Errorf("got  %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
	for _, servers := range []string{"nats://u:Pw-Secret@[bad", "nats://u:Pw-Secret%zz@h:4222", "nats://Pw-Secret@h:port", "nats://u:Pw-Secret@",
		"nats://a:4222,nats://u:Pw-Secret@[b", "nats://u:Pw-Secret@a:4222,nats://v:Pw-Secret@b:4222",
		"nats://u:Pw-Se,cret@h:4222", "nats://a:4222,u:Pw-Se,cret@h:4222", "nats:/u:Pw-Secret@h:4222", "nats://h:4222/u:Pw-Secret@x",
		"nats://h:4222?u:Pw-Secret@x", "nats://h:4222#u:Pw-Secret@x", "nats://u:Pw-Secret", "nats://a:4222,nats://u:Pw-Secret"} {
		_, err := Resolve(layer("a", Values{Servers: servers}))
		if !errors.Is(err, ErrSetting) || strings.Contains(err.Error(), "Pw-Se") || strings.Contains(err.Error(), "cret") || strings.Contains(err.Error(), "zz") {
			t.Errorf("servers %q: got %v, want an ErrSetting without the password", servers, err)
		}
	}
}
