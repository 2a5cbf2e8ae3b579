package streams_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/streams"
)

// TestCheckOptions: provision refuses, naming the flag, what would weaken
// central: a retention under two years (unless allowed for a test
// central), a horizon not shorter than it, replicas or partitions out of
// range.
func TestCheckOptions(t *testing.T) {
	ok := central.StreamOptions{Partitions: 1, Replicas: 3, MaxAge: central.DefaultHorizon, Retention: central.DefaultRetention}
	if err := streams.CheckOptions(ok, false); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	tests := []struct {
		name  string
		edit  func(*central.StreamOptions)
		short bool
		want  string
	}{
		{"no replicas", func(o *central.StreamOptions) { o.Replicas = 0 }, false, "--replicas"},
		{"six replicas", func(o *central.StreamOptions) { o.Replicas = 6 }, false, "--replicas"},
		{"no partitions", func(o *central.StreamOptions) { o.Partitions = 0 }, false, "--partitions"},
		{"too many partitions", func(o *central.StreamOptions) { o.Partitions = central.MaxPartitions + 1 }, false, "--partitions"},
		{"a year's retention", func(o *central.StreamOptions) { o.Retention = 365 * 24 * time.Hour }, false, "--retention"},
		{"horizon as long as retention", func(o *central.StreamOptions) { o.MaxAge = o.Retention }, false, "--max-age"},
		{"no horizon", func(o *central.StreamOptions) { o.MaxAge = 0 }, false, "--max-age"},
		{"a short retention allowed", func(o *central.StreamOptions) { o.Retention = 48 * time.Hour; o.MaxAge = time.Hour }, true, ""},
	}
	for _, tc := range tests {
		o := ok
		tc.edit(&o)
		err := streams.CheckOptions(o, tc.short)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
