// Package dlqtest puts movements in a real queue's quarantine, as the
// sender does when it gives up on them, for the tests of the packages that
// serve the quarantine (dlq and control), and lists the pending movements
// for the tests that check what stays behind (dlq, sync). It is for tests
// only.
package dlqtest

import (
	"strings"
	stdsync "sync"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// Clock is a settable clock, safe for concurrent use.
type Clock struct {
	mu  stdsync.Mutex
	now time.Time
}

// NewClock returns a Clock set to 2026-03-01 12:00 UTC.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Enqueue stores one pending movement, given as its JSON, and returns its
// key and sequence.
func Enqueue(t testing.TB, q *queue.Queue, now time.Time, payload string) (string, uint64) {
	t.Helper()
	p, es := movement.Prepare([]byte(payload), q.StoreID(), now)
	if es != nil {
		t.Fatalf("prepare %s: %v", payload, es)
	}
	res, err := q.Enqueue([]movement.Prepared{p})
	if err != nil {
		t.Fatalf("enqueue %s: %v", p.MovementID, err)
	}
	return p.KeyString(), res[0].Seq
}

// Quarantine stores one movement, given as its JSON, and moves it to the
// quarantine with reason ("<class>:<kind>"; "permanent:too_large" when
// empty), charged as one attempt. It returns the movement's key.
func Quarantine(t testing.TB, q *queue.Queue, now time.Time, payload, reason string) string {
	t.Helper()
	key, seq := Enqueue(t, q, now, payload)
	leased, err := q.Lease(now, 1<<20)
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	var others []uint64
	for _, r := range leased {
		if r.Seq != seq {
			others = append(others, r.Seq)
		}
	}
	q.Release(others...)
	if reason == "" {
		reason = "permanent:too_large"
	}
	kind := reason[strings.Index(reason, ":")+1:]
	err = q.Settle(queue.Settlement{Quarantines: []queue.QuarantineAt{{
		Seq:          seq,
		Failure:      queue.Failure{Kind: "permanent:" + kind, Text: "central refused the movement: " + kind},
		Reason:       reason,
		Charge:       true,
		ConnState:    "online",
		AgentVersion: "1.2.3-test",
	}}})
	if err != nil {
		t.Fatalf("quarantine %s: %v", key, err)
	}
	return key
}

// Events returns the journal events of action ("" for all), oldest first.
func Events(t testing.TB, q *queue.Queue, action string) []queue.Event {
	t.Helper()
	var out []queue.Event
	if err := q.Events(time.Time{}, func(e queue.Event) bool {
		if action == "" || e.Action == action {
			out = append(out, e)
		}
		return true
	}); err != nil {
		t.Fatalf("Events: %v", err)
	}
	return out
}

// State returns where the movement of key is.
func State(t testing.TB, q *queue.Queue, key string) queue.State {
	t.Helper()
	k, ok := movement.ParseKey(key)
	if !ok {
		t.Fatalf("bad key %q", key)
	}
	e, err := q.Get(k)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	return e.State
}

// Pending returns every pending movement, in sequence order, through the
// queue's public reads (LookupSeqs, Get).
func Pending(t testing.TB, q *queue.Queue) []*queue.Record {
	t.Helper()
	last, err := q.LastSeq()
	if err != nil {
		t.Fatalf("LastSeq: %v", err)
	}
	seqs := make([]uint64, last)
	for i := range seqs {
		seqs[i] = uint64(i) + 1
	}
	l, err := q.LookupSeqs(seqs)
	if err != nil {
		t.Fatalf("LookupSeqs: %v", err)
	}
	var out []*queue.Record
	for _, s := range l.States {
		if s.State != queue.Pending {
			continue
		}
		e, err := q.Get(s.Key)
		if err != nil || e.Record == nil {
			t.Fatalf("Get pending seq %d: %v", s.Seq, err)
		}
		out = append(out, e.Record)
	}
	return out
}

// ReopenReadOnly closes q and opens its file read-only, as a CLI command
// does while the agent is stopped. The new queue is closed when the test
// ends.
func ReopenReadOnly(t testing.TB, q *queue.Queue) *queue.Queue {
	t.Helper()
	q.Close()
	ro, err := queue.Open(queue.Options{Path: q.Path(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	return ro
}
