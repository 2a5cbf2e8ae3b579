package remote_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/fleet"
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

// TestSummaryCarriesDiskLineageAndLedger: the summary says what the
// fleet page shows beside the counts: the free disk, the data file's
// origin and a held lineage, the newest acknowledged checkpoint and why
// central cannot be used, all from the status document.
func TestSummaryCarriesDiskLineageAndLedger(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := &status.Status{StoreID: "S0001", GeneratedAt: at}
	st.Connection = status.Connection{State: status.Offline, Problem: &status.ConnProblem{Reason: status.ReasonAuth}}
	st.DataFile = status.DataFile{Path: "agent.db", FreeBytes: 5 << 30, Lineage: &status.FileLineage{FileID: "f2", Origin: "restored", RestoredAt: &at, Foreign: "f1"}}
	st.Ledger = &status.Ledger{Log: "L1", Signed: 12, Published: 10, LastCheckpointAt: &at}
	s := remote.SummaryOf(st)
	if s.FreeDiskBytes == nil || *s.FreeDiskBytes != 5<<30 || s.FileOrigin != "restored" || s.RestoredAt == nil ||
		s.Lineage != status.LineageHeld || s.CheckpointLog != "L1" || s.CheckpointSize != 10 || s.CheckpointAt == nil || s.Problem != status.ReasonAuth {
		t.Errorf("summary = %+v", s)
	}
	b, err := json.Marshal(s)
	if err != nil || len(b) > central.MaxFleetValue/4 {
		t.Errorf("summary is %d bytes (%v), want well within the fleet view's %d", len(b), err, central.MaxFleetValue)
	}
	// A status read from a stopped agent's file has no disk figure to give.
	if s := remote.SummaryOf(&status.Status{StoreID: "S0001"}); s.FreeDiskBytes != nil || s.Lineage != "" || s.CheckpointSize != 0 {
		t.Errorf("an empty status gives %+v, want no disk, lineage or checkpoint", s)
	}
}
