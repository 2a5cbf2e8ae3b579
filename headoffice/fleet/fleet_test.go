package fleet

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/status"
)

// TestJudgeFleet is the fleet view's rule as a table.
func TestJudgeFleet(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	summary := func(store string, quarantined uint64) []byte {
		b, _ := json.Marshal(command.Summary{StoreID: store, State: status.Online, Quarantined: quarantined, GeneratedAt: now})
		return b
	}
	limits := Limits{Stale: 2 * time.Minute, Silent: 15 * time.Minute, MaxAge: time.Hour}
	tests := []struct {
		name   string
		entry  Entry
		roster []string
		want   string
	}{
		{"healthy", Entry{"S1", now.Add(-30 * time.Second), summary("S1", 0), false}, nil, OK},
		{"quarantine", Entry{"S1", now, summary("S1", 3), false}, nil, Attention},
		{"stale", Entry{"S1", now.Add(-5 * time.Minute), summary("S1", 0), false}, nil, Stale},
		{"silent", Entry{"S1", now.Add(-time.Hour), summary("S1", 0), false}, nil, Silent},
		{"names another store", Entry{"S1", now, summary("S2", 0), false}, nil, Unverifiable},
		{"unreadable", Entry{"S1", now, []byte("{"), false}, nil, Unverifiable},
		{"carries central's headers", Entry{"S1", now, summary("S1", 0), true}, nil, Unverifiable},
		{"not on the roster", Entry{"S9", now, summary("S9", 0), false}, []string{"S1"}, Unknown},
		{"lineage held", Entry{"S1", now, func() []byte {
			b, _ := json.Marshal(command.Summary{StoreID: "S1", State: status.Online, Lineage: status.LineageHeld, GeneratedAt: now})
			return b
		}(), false}, nil, Attention},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			view := Judge([]Entry{tt.entry}, tt.roster, now, limits)
			i := slices.IndexFunc(view, func(v Store) bool { return v.Store == tt.entry.Store })
			if i < 0 || view[i].State != tt.want {
				t.Fatalf("got %+v, want %s %s", view, tt.entry.Store, tt.want)
			}
		})
	}
}
