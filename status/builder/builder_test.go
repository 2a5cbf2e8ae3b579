package builder

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
)

func TestBuilder(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: "S0042", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	var items []movement.Prepared
	for i, schedule := range []string{"", "", "CII"} {
		js := fmt.Sprintf(`{"movement_id":"M%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"`, i)
		if schedule != "" {
			js += `,"schedule":"` + schedule + `"`
		}
		p, errs := movement.Prepare([]byte(js+"}"), "S0042", now)
		if errs != nil {
			t.Fatal(errs)
		}
		items = append(items, p)
	}
	if _, err := q.Enqueue(items); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		src     Sources
		state   string
		running bool
	}{
		{"stopped", Sources{Queue: q, Clock: clock}, status.Stopped, false},
		{"running", Sources{Queue: q, Clock: clock, Running: true, Connection: func() status.Connection { return status.Connection{State: status.Online} },
			LineageCheck: func() *status.LineageCheck { return &status.LineageCheck{State: status.LineageDone, Skipped: 1} }}, status.Online, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(tt.src)
			now = now.Add(time.Minute)
			st, err := b.Status()
			if err != nil {
				t.Fatal(err)
			}
			if st.Connection.State != tt.state || st.Agent.Running != tt.running || (st.Agent.PID != 0) != tt.running {
				t.Errorf("got state %q, running %v, pid %d; want %q, %v", st.Connection.State, st.Agent.Running, st.Agent.PID, tt.state, tt.running)
			}
			if l := st.DataFile.Lineage; l == nil || (l.Check != nil) != tt.running || tt.running && l.Check.Skipped != 1 {
				t.Errorf("lineage %+v: want the lineage check when running", l)
			}
			if st.HighestSeq != 3 {
				t.Errorf("highest_seq %d, want 3 (the last sequence assigned)", st.HighestSeq)
			}
			if want := (status.ClassCounts{Controlled: 1, Ordinary: 2, Total: 3}); st.StoreID != "S0042" || st.Counts.Pending != want {
				t.Errorf("got store %q, pending %+v; want S0042, %+v", st.StoreID, st.Counts.Pending, want)
			}
			if st.OldestPendingAt == nil || st.OldestPendingAge <= 0 || !st.GeneratedAt.Equal(now) {
				t.Errorf("got oldest %v (age %v s), generated %v", st.OldestPendingAt, st.OldestPendingAge, st.GeneratedAt)
			}
		})
	}
}

func TestRates(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	type s struct {
		after                         time.Duration
		accepted, synced, quarantined uint64
	}
	tests := []struct {
		name    string
		samples []s
		want    status.Rates
	}{
		{"no samples", nil, status.Rates{}},
		{"one sample", []s{{0, 10, 0, 0}}, status.Rates{}},
		{"two minutes", []s{{0, 10, 0, 0}, {time.Minute, 40, 20, 2}, {2 * time.Minute, 70, 40, 4}}, status.Rates{AcceptedPerMinute: 30, SyncedPerMinute: 20, QuarantinedPerMinute: 2}},
		{"older than five minutes dropped", []s{{0, 0, 0, 0}, {5 * time.Minute, 600, 0, 0}, {7 * time.Minute, 620, 0, 0}}, status.Rates{AcceptedPerMinute: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r rates
			for _, x := range tt.samples {
				r.add(t0.Add(x.after), x.accepted, x.synced, x.quarantined)
			}
			if got := r.perMinute(); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
