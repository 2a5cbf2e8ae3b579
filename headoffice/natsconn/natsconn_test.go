package natsconn

import (
	"errors"
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
