package fleet

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/status"
)

// clock is a settable test clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

var indexLimits = Limits{Stale: 2 * time.Minute, Silent: 15 * time.Minute, MaxAge: time.Hour}

// summaryJSON is a store's summary as its agent writes it, changed by set.
func summaryJSON(store string, at time.Time, set func(*command.Summary)) []byte {
	s := command.Summary{StoreID: store, State: status.Online, Version: "1.4.0", GeneratedAt: at}
	if set != nil {
		set(&s)
	}
	b, _ := json.Marshal(s)
	return b
}

// testIndex is an index over a roster of S0001…S0006 in two regions,
// with S0001–S0005 seen in the states the table below expects.
func testIndex(t *testing.T) (*Index, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	roster := []RosterStore{
		{Store: "S0001", Region: "north", Tags: []string{"24h"}},
		{Store: "S0002", Region: "north"},
		{Store: "S0003", Region: "south", Tags: []string{"24h", "drive-thru"}},
		{Store: "S0004", Region: "south"},
		{Store: "S0005", Region: "south"},
		{Store: "S0006", Region: "west"},
	}
	ix := NewIndex(IndexOptions{Roster: roster, Limits: indexLimits, Clock: c.Now})
	free := uint64(1 << 30)
	ix.Apply(Entry{"S0001", c.now, summaryJSON("S0001", c.now, func(s *command.Summary) { s.Pending, s.FreeDiskBytes = 3, &free }), false})
	ix.Apply(Entry{"S0002", c.now, summaryJSON("S0002", c.now, func(s *command.Summary) { s.Quarantined = 2 }), false})
	ix.Apply(Entry{"S0003", c.now.Add(-5 * time.Minute), summaryJSON("S0003", c.now, func(s *command.Summary) {
		s.State, s.Reason, s.Version = status.Offline, "no connection", "1.5.0"
	}), false})
	ix.Apply(Entry{"S0004", c.now, summaryJSON("S0004", c.now, func(s *command.Summary) { s.Lineage, s.FileOrigin = status.LineageHeld, "replaced" }), false})
	ix.Apply(Entry{"S0005", c.now, summaryJSON("S0009", c.now, nil), false}) // names another store
	ix.Apply(Entry{"S0099", c.now, summaryJSON("S0099", c.now, nil), false}) // not on the roster
	return ix, c
}

func stores(p Page) []string {
	var out []string
	for _, r := range p.Records {
		out = append(out, r.Store)
	}
	return out
}

// TestIndexQuery is the index's selection and order as a table: problems
// first by default, each filter alone and together, the prefix search,
// sorting and paging.
func TestIndexQuery(t *testing.T) {
	ix, _ := testIndex(t)
	tests := []struct {
		name    string
		q       Query
		want    []string
		matched int
	}{
		{"problems first", Query{}, []string{"S0005", "S0006", "S0003", "S0002", "S0004", "S0099", "S0001"}, 7},
		{"a state", Query{State: Attention}, []string{"S0002", "S0004"}, 2},
		{"a condition", Query{State: CondQuarantining}, []string{"S0002"}, 1},
		{"syncing", Query{State: CondSyncing}, []string{"S0001"}, 1},
		{"offline", Query{State: CondOffline}, []string{"S0003"}, 1},
		{"lineage held", Query{State: CondLineageHeld}, []string{"S0004"}, 1},
		{"file replaced", Query{State: CondFileReplaced}, []string{"S0004"}, 1},
		{"region", Query{Region: "south"}, []string{"S0005", "S0003", "S0004"}, 3},
		{"tag", Query{Tag: "24h"}, []string{"S0003", "S0001"}, 2},
		{"version", Query{Version: "1.5.0"}, []string{"S0003"}, 1},
		{"region and tag", Query{Region: "south", Tag: "24h"}, []string{"S0003"}, 1},
		{"prefix", Query{Prefix: "S000", Sort: SortStore}, []string{"S0001", "S0002", "S0003", "S0004", "S0005", "S0006"}, 6},
		{"prefix and state", Query{Prefix: "S00", State: OK}, []string{"S0001"}, 1},
		{"no such prefix", Query{Prefix: "X"}, nil, 0},
		{"no such region", Query{Region: "east"}, nil, 0},
		{"by pending, most first", Query{Sort: SortPending, Desc: true, Limit: 1}, []string{"S0001"}, 7},
		{"by free disk", Query{Sort: SortFreeDisk, Desc: true, Limit: 1}, []string{"S0001"}, 7},
		{"by version", Query{Sort: SortVersion, Desc: true, Limit: 1}, []string{"S0003"}, 7},
		{"second page", Query{Sort: SortStore, Offset: 5, Limit: 5}, []string{"S0006", "S0099"}, 7},
		{"past the end", Query{Offset: 50}, nil, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ix.Query(tt.q)
			if got := stores(p); !slices.Equal(got, tt.want) || p.Matched != tt.matched {
				t.Errorf("got %v (%d matched), want %v (%d)", got, p.Matched, tt.want, tt.matched)
			}
			if p.Total != 7 {
				t.Errorf("total %d, want 7", p.Total)
			}
		})
	}
	p := ix.Query(Query{})
	if !slices.Equal(p.Regions, []string{"north", "south", "west"}) || !slices.Equal(p.Tags, []string{"24h", "drive-thru"}) || !slices.Equal(p.Versions, []string{"1.4.0", "1.5.0"}) {
		t.Errorf("facets %v %v %v", p.Regions, p.Tags, p.Versions)
	}
	if p.Counts[Attention] != 2 || p.Counts[Missing] != 1 || p.Counts[CondQuarantining] != 1 {
		t.Errorf("counts %v", p.Counts)
	}
	if got := ix.Stores(Query{Region: "south", Limit: 1}); !slices.Equal(got, []string{"S0003", "S0004", "S0005"}) {
		t.Errorf("Stores(south) = %v: paging must not apply", got)
	}
}

// TestIndexMovesAStoreBetweenFacets: a new summary replaces the old one
// in every index, and time alone makes a store stale, then silent.
func TestIndexMovesAStoreBetweenFacets(t *testing.T) {
	ix, c := testIndex(t)
	ix.Apply(Entry{"S0002", c.now, summaryJSON("S0002", c.now, func(s *command.Summary) { s.Version = "1.5.0" }), false})
	if got := stores(ix.Query(Query{State: CondQuarantining})); got != nil {
		t.Errorf("quarantining after the quarantine emptied: %v", got)
	}
	if got := stores(ix.Query(Query{Version: "1.5.0", Sort: SortStore})); !slices.Equal(got, []string{"S0002", "S0003"}) {
		t.Errorf("version 1.5.0: %v", got)
	}
	if got := ix.Query(Query{}).Versions; slices.Contains(got, "") {
		t.Errorf("versions %v", got)
	}
	c.now = c.now.Add(3 * time.Minute)
	ix.Rejudge()
	if got := stores(ix.Query(Query{State: Stale, Sort: SortStore})); !slices.Equal(got, []string{"S0001", "S0002", "S0003", "S0004"}) {
		t.Errorf("stale after 3 minutes: %v", got)
	}
	c.now = c.now.Add(time.Hour)
	ix.Rejudge()
	if got := stores(ix.Query(Query{State: Silent, Sort: SortStore})); !slices.Equal(got, []string{"S0001", "S0002", "S0003", "S0004"}) {
		t.Errorf("silent after an hour: %v", got)
	}
	if r, _ := ix.Get("S0005"); r.State != Unverifiable {
		t.Errorf("an unverifiable store became %s by time", r.State)
	}
	if got := ix.Stats(); got.Applied != 7 || got.Unreadable != 1 || !got.JudgedAt.Equal(c.now) {
		t.Errorf("stats %+v", got)
	}
	// What Get returns is a copy.
	r, _ := ix.Get("S0001")
	r.Summary.Pending, r.Tags[0] = 99, "x"
	if again, _ := ix.Get("S0001"); again.Summary.Pending != 3 || again.Tags[0] != "24h" {
		t.Errorf("changing a record changed the index: %+v", again)
	}
}

// TestIndexCountersigned: a store's newest checkpoint is countersigned
// when the witness countersigned that log at that size or beyond.
func TestIndexCountersigned(t *testing.T) {
	ix, c := testIndex(t)
	ix.Apply(Entry{"S0001", c.now, summaryJSON("S0001", c.now, func(s *command.Summary) { s.CheckpointLog, s.CheckpointSize = "L1", 10 }), false})
	check := func(want bool) {
		t.Helper()
		r, _ := ix.Get("S0001")
		if known, yes := r.Countersigned(true); !known || yes != want {
			t.Errorf("countersigned = %v %v, want known %v", known, yes, want)
		}
	}
	check(false)
	ix.Witness("S0001", Witnessed{Log: "L1", Size: 9})
	check(false)
	ix.Witness("S0001", Witnessed{Log: "L1", Size: 12})
	check(true)
	ix.Witness("S0001", Witnessed{Log: "L1", Size: 11}) // older: kept the newest
	check(true)
	ix.Apply(Entry{"S0001", c.now, summaryJSON("S0001", c.now, func(s *command.Summary) { s.CheckpointLog, s.CheckpointSize = "L1", 20 }), false})
	check(false)
	if r, _ := ix.Get("S0002"); func() bool { k, _ := r.Countersigned(true); return k }() {
		t.Error("a store that names no checkpoint is known countersigned")
	}
	// A countersignature that comes before the store's first summary is
	// kept for it, and makes no store appear by itself.
	ix.Witness("S7777", Witnessed{Log: "L7", Size: 5})
	if _, ok := ix.Get("S7777"); ok {
		t.Error("a witness record made a store appear")
	}
	ix.Apply(Entry{"S7777", c.now, summaryJSON("S7777", c.now, func(s *command.Summary) { s.CheckpointLog, s.CheckpointSize = "L7", 5 }), false})
	if r, _ := ix.Get("S7777"); func() bool { _, yes := r.Countersigned(true); return !yes }() {
		t.Errorf("S7777's countersignature, seen before its summary, was lost: %+v", r.Witnessed)
	}
}

// TestIndexScalesWithMatches: 60,000 stores; a page of a small facet
// sorts only that facet's stores, and every page is at most the limit.
func TestIndexScalesWithMatches(t *testing.T) {
	c := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	ix := NewIndex(IndexOptions{Limits: indexLimits, Clock: c.Now})
	for i := range 60_000 {
		id := fmt.Sprintf("S%05d", i)
		ix.Apply(Entry{id, c.now, summaryJSON(id, c.now, func(s *command.Summary) {
			if i%1000 == 0 {
				s.Quarantined = 1
			}
		}), false})
	}
	p := ix.Query(Query{State: CondQuarantining, Limit: 1000})
	if p.Matched != 60 || len(p.Records) != 60 {
		t.Errorf("quarantining: %d matched, %d on the page; want 60", p.Matched, len(p.Records))
	}
	p = ix.Query(Query{Limit: 5000})
	if p.Matched != 60_000 || len(p.Records) != MaxPageSize {
		t.Errorf("everything: %d matched, %d on the page; want 60000 and %d", p.Matched, len(p.Records), MaxPageSize)
	}
	if got := stores(ix.Query(Query{Prefix: "S4999", Sort: SortStore})); len(got) != 10 || got[0] != "S49990" {
		t.Errorf("prefix S4999: %v", got)
	}
}
