package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"user and password", "nats://u:p@host:4222", "nats://host:4222"},
		{"token", "tls://tok@h", "tls://h"},
		{"no credentials", "nats://central.example:4222", "nats://central.example:4222"},
		{"https with path", "https://admin:pw@mon.example:8222/jsz?acc=1", "https://mon.example:8222/jsz?acc=1"},
		{"unparsable host", "nats://u:p@[bad", "nats://[bad"},
		{"unparsable port", "nats://u:p@host:port", "nats://host:port"},
		{"password with a slash", "nats://u:p/w@host:4222", "nats://host:4222"},
		{"password with a question mark", "nats://u:p?w@host:4222", "nats://host:4222"},
		{"password with a hash", "nats://u:p#w@host:4222", "nats://host:4222"},
		{"escaped at sign", "nats://u%40x:p@host:4222", "nats://host:4222"},
		{"no scheme", "u:p@host:4222", "host:4222"},
		{"opaque", "nats:u:p@host", "host"},
		{"two at signs", "nats://a@b:c@host", "nats://host"},
		{"bad escape", "nats://u:p%zz@host", "nats://host"},
		{"garbage", "%%%", "%%%"},
		{"garbage with at", "%%u:p@%%", "%%"},
		{"at at the end", "nats://u:p@", "nats:"},
		{"empty", "", ""},
		{"control character", "nats://u:p@ho\x7fst", "nats://ho\x7fst"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := URL(tt.in); got != tt.want {
				t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestURLs(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"list", "nats://u:p@a:4222, tls://tok@b:4222,nats://c:4222", "nats://a:4222,tls://b:4222,nats://c:4222"},
		{"list with a bad one", "nats://u:p@[bad,nats://x:y@ok:4222", "nats://[bad,nats://ok:4222"},
		{"one", "nats://u:p@host:4222", "nats://host:4222"},
		{"empty items", "nats://u:p@a,,", "nats://a,,"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := URLs(tt.in); got != tt.want {
				t.Errorf("URLs(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzURL checks that no input gives back what stands before its '@'
// (where user information is): a marker put there never comes out.
func FuzzURL(f *testing.F) {
	for _, s := range [][2]string{{"nats://", "host:4222"}, {"nats://u:", "[bad"}, {"tls://", "h"}, {"a@", "c"}, {"", "h/p?q#f"}, {"@://", ""}} {
		f.Add(s[0], s[1])
	}
	const marker = "SECRETX"
	f.Fuzz(func(t *testing.T, before, after string) {
		s := before + marker + "@" + after
		got := URL(s)
		if strings.Contains(got, "@") {
			t.Errorf("URL(%q) = %q keeps an '@'", s, got)
		}
		if strings.Contains(got, marker) {
			t.Errorf("URL(%q) = %q keeps what stands before the '@'", s, got)
		}
	})
}
