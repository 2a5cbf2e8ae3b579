package tally

import (
	"fmt"
	"slices"
	stdsync "sync"
	"testing"
	"testing/synctest"
	"time"
)

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// TestFlood notes an event every 10 ms for three hours, from a thousand
// causes, and checks what came out: at most one report per cause per
// window, at most the budget an hour, and every event in a report or
// still waiting.
func TestFlood(t *testing.T) {
	const window, budget, causes = time.Minute, 100, 1000
	tl := New[int, string](window, budget, nil)
	perHour := map[int]int{}
	last := map[int]time.Time{}
	reported := 0
	take := func(rs []Report[int, string]) {
		for _, r := range rs {
			if at, ok := last[r.Cause]; ok && r.At.Sub(at) < window {
				t.Fatalf("cause %d reported at %s and again at %s", r.Cause, at, r.At)
			}
			last[r.Cause] = r.At
			perHour[int(r.At.Sub(t0)/time.Hour)]++
			reported += r.Count
		}
	}
	n := 0
	for now := t0; now.Before(t0.Add(3 * time.Hour)); now = now.Add(10 * time.Millisecond) {
		take(tl.Note(n%causes, "x", now))
		n++
	}
	for h, k := range perHour {
		if k > budget {
			t.Errorf("hour %d: %d reports, over the budget of %d", h, k, budget)
		}
	}
	rest := tl.Rest(t0.Add(3 * time.Hour))
	if len(rest) > causes {
		t.Errorf("%d reports at the end for %d causes", len(rest), causes)
	}
	take(rest)
	if reported != n {
		t.Errorf("the reports stand for %d events of %d", reported, n)
	}
}

// TestBound: past the bound, new causes are counted under the fold, and a
// cause whose window passed with nothing to report is forgotten, making
// room.
func TestBound(t *testing.T) {
	tl := New[string, int](time.Minute, 1000, nil).Bound(2, func(string) string { return "other" })
	for i, c := range []string{"a", "b", "c", "d"} {
		tl.Note(c, i, t0)
	}
	tl.Note("c", 4, t0.Add(time.Second))
	rest := tl.Rest(t0.Add(2 * time.Second))
	got := map[string]int{}
	for _, r := range rest {
		got[r.Cause] = r.Count
	}
	// a, b and the first under other were reported at once.
	if fmt.Sprint(got) != "map[other:2]" {
		t.Errorf("after the bound: %v, want 2 under other", got)
	}
	if len(tl.Due(t0.Add(3*time.Minute))) != 0 || len(tl.causes) != 0 {
		t.Errorf("%d causes kept with nothing to report past their window", len(tl.causes))
	}
	if rs := tl.Note("e", 5, t0.Add(4*time.Minute)); len(rs) != 1 || rs[0].Cause != "e" {
		t.Errorf("a new cause once the others are forgotten: %+v", rs)
	}
}

// TestReporterTimer: what is not due when noted is emitted by the timer
// once the window has passed, and Drain emits the rest at once.
func TestReporterTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The timer emits from its own goroutine.
		var mu stdsync.Mutex
		var reports []Report[string, string]
		got := func() []Report[string, string] {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(reports)
		}
		r := NewReporter(New[string, string](time.Minute, 100, nil), nil, func(rs []Report[string, string]) {
			mu.Lock()
			reports = append(reports, rs...)
			mu.Unlock()
		})
		r.Note("a", "1")
		r.Note("a", "2")
		r.Note("a", "3")
		if got := got(); len(got) != 1 || got[0].Count != 1 {
			t.Fatalf("at once: %+v, want the first event", got)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := got(); len(got) != 2 || got[1].Count != 2 || got[1].Detail != "3" {
			t.Fatalf("after the window: %+v, want the other two, with the latest's detail", got)
		}
		r.Note("a", "4")
		r.Drain()
		if got := got(); len(got) != 3 || got[2].Count != 1 {
			t.Fatalf("drained: %+v", got)
		}
		r.Note("a", "5") // after Drain: counted, no timer armed
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if got := got(); len(got) != 3 {
			t.Fatalf("a stopped reporter's timer fired: %+v", got)
		}
	})
}
