package redact

import "testing"

func TestShown(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"lots", "lots", true},
		{"127.0.0.1:8717", "127.0.0.1:8717", true},
		{"nats://central.example:4222", "nats://central.example:4222", true},
		{"nats://u:pw@central.example:4222/x?password=pw", "nats://central.example:4222", true},
		{"nats://[::1]:4222", "nats://[::1]:4222", true},
		{"nats://u:pw", "", false},
		{"nats://u:pw:4222", "", false},
		{"nats:u:pw", "", false},
		{"nats://u:pw%zz@h", "", false},
		{"tls://u:p#w@h", "", false},
		{"nats://u:pw@h,nats://v:pw2", "", false},
		{"u:pw@h", "", false},
	} {
		got, ok := Shown(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Shown(%q) = %q, %v, want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
