package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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
// problems, the newest, and at most MaxClosedPerStore of one store: a
// store that flaps keeps its own newest, and every other store's stay.
func TestProblemBookBoundsTheClosed(t *testing.T) {
	b := NewProblemBook()
	t0 := time.Now()
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	for i := range MaxClosed + 5 {
		store := fmt.Sprintf("S%05d", i%(MaxClosed/10))
		b.Open("offline", store, "", at(i))
		b.Close("offline", store, at(i))
	}
	got := b.List("", false, 0)
	if len(got) != MaxClosed || !got[0].Opened.Equal(at(MaxClosed+4)) {
		t.Fatalf("%d closed kept, newest opened %s", len(got), got[0].Opened)
	}
	// S00001 flaps far more often than it may keep.
	for i := range 10 * MaxClosedPerStore {
		b.Open("paused", "S00001", "", at(MaxClosed+10+i))
		b.Close("paused", "S00001", at(MaxClosed+10+i))
	}
	if n := len(b.List("S00001", false, 0)); n != MaxClosedPerStore {
		t.Errorf("the flapping store keeps %d closed problems, want %d", n, MaxClosedPerStore)
	}
	if n := len(b.List("S00002", false, 0)); n != 10 {
		t.Errorf("another store keeps %d closed problems after the flapping, want its 10", n)
	}
}

// TestProblemBookClearAfter: with a ClearAfter, a problem that is absent
// for less than it and seen again stays open (no second alert); one
// absent for it closes, once.
func TestProblemBookClearAfter(t *testing.T) {
	b := NewProblemBook()
	b.SetClearAfter(time.Minute)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if !b.Open("paused", "S1", "", t0) {
		t.Fatal("the first open did not open")
	}
	for i := 1; i <= 20; i++ { // flapping every 2 s: absent, present, ...
		at := t0.Add(time.Duration(i) * 2 * time.Second)
		if i%2 == 1 && b.Close("paused", "S1", at) || i%2 == 0 && b.Open("paused", "S1", "", at) {
			t.Fatalf("step %d: the flapping problem closed or opened again", i)
		}
	}
	at := t0.Add(time.Minute)
	if b.Close("paused", "S1", at) || b.Close("paused", "S1", at.Add(59*time.Second)) {
		t.Fatal("closed before a minute absent")
	}
	if !b.Close("paused", "S1", at.Add(time.Minute)) || b.Close("paused", "S1", at.Add(2*time.Minute)) {
		t.Fatal("not closed once after a minute absent")
	}
}

// TestProblemDetailIsClipped: a store's detail of any size is kept to
// MaxDetail bytes, on a rune boundary.
func TestProblemDetailIsClipped(t *testing.T) {
	b := NewProblemBook()
	b.Open("paused", "S1", strings.Repeat("é", 3000), time.Now())
	d := b.List("S1", true, 0)[0].Detail
	if len(d) > MaxDetail || !utf8.ValidString(d) || !strings.HasSuffix(d, "…") {
		t.Errorf("detail of %d bytes (valid %v): %q…", len(d), utf8.ValidString(d), d[:20])
	}
}
