package remote_test

import (
	"slices"
	"testing"
	"time"

	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/remote"
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
	entries, err := fleet.Read(testContext(t), natstest.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	view := fleet.Judge(entries, []string{"S0001", "S0002", "S0003"}, time.Now(), fleet.Limits{Stale: time.Minute, Silent: time.Hour, MaxAge: time.Hour})
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
