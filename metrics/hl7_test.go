package metrics

import (
	"path/filepath"
	"testing"

	"github.com/rxedge/agent/queue"
)

// TestHL7Refusals: a series per reason from the start, each the count the
// listener reports at scrape time.
func TestHL7Refusals(t *testing.T) {
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: "S1"})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	m := New(q)
	counts := map[string]uint64{"too_many_connections": 3}
	m.WatchHL7Refusals([]string{"not_allowed", "too_many_connections"}, func() map[string]uint64 { return counts })
	for _, want := range []map[string]float64{
		{"not_allowed": 0, "too_many_connections": 3},
		{"not_allowed": 7, "too_many_connections": 3},
	} {
		fams, err := m.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range fams {
			if f.GetName() == "rxedge_intake_hl7_refusals_total" {
				for _, s := range f.GetMetric() {
					got[labels(s)["reason"]] = value(s)
				}
			}
		}
		if len(got) != len(want) || got["not_allowed"] != want["not_allowed"] || got["too_many_connections"] != want["too_many_connections"] {
			t.Errorf("series %v, want %v", got, want)
		}
		counts["not_allowed"] = 7
	}
}
