package queue

import (
	"fmt"
	"time"
)

// Defaults of Retention.
const (
	// DefaultSyncedKeys is longer than central's dedupe horizon
	// (central.DefaultHorizon, 35 days): see DESIGN §5, "Horizon and the
	// agent's memory".
	DefaultSyncedKeys = 40 * 24 * time.Hour
	DefaultJournal    = 730 * 24 * time.Hour
)

// Retention is how long the agent keeps what Prune drops: the keys of
// synced movements and the journal's events (the retention: section of
// the agent's configuration). Zero values mean the default.
type Retention struct {
	SyncedKeys time.Duration `yaml:"synced_keys"`
	Journal    time.Duration `yaml:"journal"`
}

// Validate fills in the defaults and returns every problem, each naming
// its field (retention.synced_keys, retention.journal).
func (r Retention) Validate() (Retention, []string) {
	var p []string
	for _, f := range []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{{"retention.synced_keys", &r.SyncedKeys, DefaultSyncedKeys}, {"retention.journal", &r.Journal, DefaultJournal}} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0:
			p = append(p, fmt.Sprintf("%s: must be positive (got %v)", f.field, *f.v))
		}
	}
	return r, p
}
