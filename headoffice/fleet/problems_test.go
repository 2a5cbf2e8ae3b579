package fleet

import (
	"testing"
	"time"
)

// TestProblemOpensOnceAndClosesOnce is the rule of Problem as a table of
// steps: a problem seen again while open does not open again, a close
// of what is not open does nothing, and the same kind at another store
// is another problem.
func TestProblemOpensOnceAndClosesOnce(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b := NewProblemBook()
	steps := []struct {
		name        string
		open        bool
		kind, store string
		want        bool
	}{
		{"offline opens", true, "offline", "S1", true},
		{"offline again stays open", true, "offline", "S1", false},
		{"another store's offline opens", true, "offline", "S2", true},
		{"a quarantine at S1 opens", true, "quarantine", "S1", true},
		{"offline closes", false, "offline", "S1", true},
		{"offline closes once", false, "offline", "S1", false},
		{"a close of what never opened", false, "sink_lag", "", false},
		{"offline opens again", true, "offline", "S1", true},
	}
	for i, s := range steps {
		at := t0.Add(time.Duration(i) * time.Minute)
		var got bool
		if s.open {
			got = b.Open(s.kind, s.store, s.name, at)
		} else {
			got = b.Close(s.kind, s.store, at)
		}
		if got != s.want {
			t.Errorf("step %d (%s): %v, want %v", i, s.name, got, s.want)
		}
	}
	all := b.List("", false, 0)
	if len(all) != 4 || all[0].Kind != "offline" || all[0].Store != "S2" || all[3].Closed == nil || !all[3].Opened.Equal(t0) {
		t.Fatalf("list %+v: want the three open (oldest first) then the closed one", all)
	}
	if open := b.List("S1", true, 0); len(open) != 2 || open[0].Kind != "quarantine" || open[0].Detail != "a quarantine at S1 opens" {
		t.Errorf("S1's open problems %+v", open)
	}
	if got := b.List("", false, 1); len(got) != 1 {
		t.Errorf("limit 1: %d problems", len(got))
	}
}

// TestProblemBookBoundsTheClosed: a book keeps at most MaxClosed closed
// problems, the newest.
func TestProblemBookBoundsTheClosed(t *testing.T) {
	b := NewProblemBook()
	t0 := time.Now()
	for i := range MaxClosed + 5 {
		b.Open("offline", "S1", "", t0.Add(time.Duration(i)*time.Second))
		b.Close("offline", "S1", t0.Add(time.Duration(i)*time.Second))
	}
	got := b.List("", false, 0)
	if len(got) != MaxClosed || !got[0].Opened.Equal(t0.Add((MaxClosed+4)*time.Second)) {
		t.Errorf("%d closed kept, newest opened %s", len(got), got[0].Opened)
	}
}
