package remote_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestFleetViewOverARealServer writes two stores' summaries as their
// agents do and reads them back as head office does: the store ids are
// the keys and the last-seen times the server's.
func TestFleetViewOverARealServer(t *testing.T) {
	srv := natstest.StartHub(t)
	s1 := startStore(t, srv.URL(), "S0001", nil, 2)
	s2 := startStore(t, srv.URL(), "S0002", nil, 0)
	before := time.Now()
	for _, s := range []*store{s1, s2} {
		st, err := s.opts.Status()
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.PublishSummary(testContext(t), s.nc, s.id, st); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := remote.ReadFleet(testContext(t), natstest.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	view := remote.JudgeFleet(entries, []string{"S0001", "S0002", "S0003"}, time.Now(), remote.FleetLimits{Stale: time.Minute, Silent: time.Hour, MaxAge: time.Hour})
	var got []string
	for _, v := range view {
		got = append(got, v.Store+" "+v.State)
		if v.LastSeen != nil && v.LastSeen.Before(before.Add(-time.Second)) {
			t.Errorf("%s last seen %s, before the write", v.Store, v.LastSeen)
		}
	}
	if want := []string{"S0001 needs_attention", "S0002 ok", "S0003 missing"}; !slices.Equal(got, want) {
		t.Errorf("fleet view = %q, want %q", got, want)
	}
	// The summary carries the last sequence assigned, for reconciliation.
	if view[0].Summary == nil || view[0].Summary.HighestSeq != 2 || view[1].Summary == nil || view[1].Summary.HighestSeq != 0 {
		t.Errorf("highest sequences: %+v, %+v; want 2 and 0", view[0].Summary, view[1].Summary)
	}
}

// TestJudgeFleet is the fleet view's rule as a table.
func TestJudgeFleet(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	summary := func(store string, quarantined uint64) []byte {
		b, _ := json.Marshal(remote.Summary{StoreID: store, State: status.Online, Quarantined: quarantined, GeneratedAt: now})
		return b
	}
	limits := remote.FleetLimits{Stale: 2 * time.Minute, Silent: 15 * time.Minute, MaxAge: time.Hour}
	tests := []struct {
		name   string
		entry  remote.FleetEntry
		roster []string
		want   string
	}{
		{"healthy", remote.FleetEntry{"S1", now.Add(-30 * time.Second), summary("S1", 0)}, nil, remote.FleetOK},
		{"quarantine", remote.FleetEntry{"S1", now, summary("S1", 3)}, nil, remote.FleetAttention},
		{"stale", remote.FleetEntry{"S1", now.Add(-5 * time.Minute), summary("S1", 0)}, nil, remote.FleetStale},
		{"silent", remote.FleetEntry{"S1", now.Add(-time.Hour), summary("S1", 0)}, nil, remote.FleetSilent},
		{"names another store", remote.FleetEntry{"S1", now, summary("S2", 0)}, nil, remote.FleetUnverifiable},
		{"unreadable", remote.FleetEntry{"S1", now, []byte("{")}, nil, remote.FleetUnverifiable},
		{"not on the roster", remote.FleetEntry{"S9", now, summary("S9", 0)}, []string{"S1"}, remote.FleetUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			view := remote.JudgeFleet([]remote.FleetEntry{tt.entry}, tt.roster, now, limits)
			i := slices.IndexFunc(view, func(v remote.FleetStore) bool { return v.Store == tt.entry.Store })
			if i < 0 || view[i].State != tt.want {
				t.Fatalf("got %+v, want %s %s", view, tt.entry.Store, tt.want)
			}
		})
	}
}
