package ingest

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name     string
		c        Config
		listen   string
		problems []string // each a prefix of one problem, in order
	}{
		{name: "defaults", listen: DefaultListen},
		{name: "off", c: Config{Listen: "off"}, listen: ""},
		{name: "beyond loopback without a token", c: Config{Listen: "0.0.0.0:8717"}, listen: "0.0.0.0:8717",
			problems: []string{"ingest.listen: 0.0.0.0:8717 is not a loopback address: also set ingest.token_file"}},
		{name: "beyond loopback with a token", c: Config{Listen: "0.0.0.0:8717", Token: strings.Repeat("t", 16)}, listen: "0.0.0.0:8717"},
		{name: "limits", c: Config{MaxRequestBytes: 100, MaxMovementBytes: 200}, listen: DefaultListen,
			problems: []string{"ingest.max_movement_bytes: must not exceed ingest.max_request_bytes"}},
		{name: "hosts and origins", c: Config{AllowedHosts: []string{"pos:1"}, AllowedOrigins: []string{"pos.example"}}, listen: DefaultListen,
			problems: []string{`ingest.allowed_hosts: "pos:1" is not a host name`, `ingest.allowed_origins: "pos.example" is not an origin`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, p := tt.c.Validate()
			if o.Listen != tt.listen {
				t.Errorf("listen %q, want %q", o.Listen, tt.listen)
			}
			if len(p) != len(tt.problems) {
				t.Fatalf("problems %q, want %q", p, tt.problems)
			}
			for i := range p {
				if !strings.HasPrefix(p[i], tt.problems[i]) {
					t.Errorf("problem %q, want it to start %q", p[i], tt.problems[i])
				}
			}
			if len(p) == 0 && (o.MaxRequestBytes <= 0 || o.MaxMovementBytes <= 0) {
				t.Errorf("limits %d/%d not filled in", o.MaxRequestBytes, o.MaxMovementBytes)
			}
		})
	}
}
