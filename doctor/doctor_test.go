package doctor

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
)

func TestCompare(t *testing.T) {
	want := central.StreamConfig(central.StreamOptions{})
	for _, tc := range []struct {
		name   string
		change func(*jetstream.StreamConfig)
		diff   string
	}{
		{"same", func(*jetstream.StreamConfig) {}, ""},
		{"deployment choices", func(c *jetstream.StreamConfig) { c.Replicas, c.Duplicates, c.MaxAge = 3, 0, 0 }, ""},
		{"many per subject", func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 5 }, "max_msgs_per_subject is 5, want 1"},
		{"purge allowed", func(c *jetstream.StreamConfig) { c.DenyPurge = false }, "deny_purge is false, want true"},
		{"no direct get", func(c *jetstream.StreamConfig) { c.AllowDirect = false }, "allow_direct is false, want true"},
		{"old evicted", func(c *jetstream.StreamConfig) { c.Discard = jetstream.DiscardOld }, "discard is "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := want
			tc.change(&got)
			d := strings.Join(Compare(got, want), "; ")
			if (tc.diff == "") != (d == "") || !strings.Contains(d, tc.diff) {
				t.Errorf("got %q, want %q", d, tc.diff)
			}
		})
	}
}
