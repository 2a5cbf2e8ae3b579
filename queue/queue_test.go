package queue

import (
	"errors"
	"fmt"
	"path/filepath"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

const testStore = "S0042"

// clock is a settable test clock.
type clock struct {
	mu  stdsync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func openTest(t testing.TB, path string, clk *clock) *Queue {
	t.Helper()
	q, err := Open(Options{Path: path, StoreID: testStore, Clock: clk.Now})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// mv prepares a movement with the given id; variant changes its content.
// fataler is what mv needs of a *testing.T or *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mv(t fataler, id string, variant int, schedule string) movement.Prepared {
	t.Helper()
	sched := ""
	if schedule != "" {
		sched = fmt.Sprintf(`,"schedule":%q`, schedule)
	}
	js := fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":%d,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"%s}`, id, variant+1, sched)
	p, es := movement.Prepare([]byte(js), testStore, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if es != nil {
		t.Fatalf("prepare %s: %v", id, es)
	}
	return p
}

func verify(t testing.TB, q *Queue) {
	t.Helper()
	if err := q.Verify(); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func TestEnqueueDuplicateAndConflict(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)

	a := mv(t, "A", 0, "")
	res, err := q.Enqueue([]movement.Prepared{a})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || res[0].Seq != 1 || res[0].Key != a.Key {
		t.Fatalf("first enqueue = %+v, want new with seq 1", res[0])
	}

	res, err = q.Enqueue([]movement.Prepared{a})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || res[0].Seq != 1 {
		t.Fatalf("resubmit = %+v, want duplicate of seq 1", res[0])
	}

	before, _ := q.Stats()
	b := mv(t, "B", 0, "")
	changed := mv(t, "A", 1, "")
	_, err = q.Enqueue([]movement.Prepared{b, changed})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Index != 1 || ce.Key != a.Key || ce.State != Pending {
		t.Fatalf("conflicting submit err = %v, want ConflictError at index 1", err)
	}
	after, _ := q.Stats()
	if before.Count(Pending) != after.Count(Pending) || after.NextSeq != before.NextSeq {
		t.Fatalf("a rejected submission changed the queue: %+v -> %+v", before, after)
	}
	if _, err := q.Get(b.Key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("B stored from a rejected submission: %v", err)
	}
	e, _ := q.Get(a.Key)
	if e.Digest != a.Digest {
		t.Fatal("conflict changed the stored movement")
	}

	// The same movement twice in one submission: stored once.
	c := mv(t, "C", 0, "CII")
	res, err = q.Enqueue([]movement.Prepared{c, c})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || !res[1].Duplicate || res[0].Seq != res[1].Seq || res[0].Seq != 2 {
		t.Fatalf("same movement twice = %+v", res)
	}
	// Same id, different content, in one submission: a conflict.
	_, err = q.Enqueue([]movement.Prepared{mv(t, "D", 0, ""), mv(t, "D", 1, "")})
	if !errors.As(err, &ce) || ce.Index != 1 || ce.State != 0 || ce.Other != 0 {
		t.Fatalf("in-submission conflict err = %v", err)
	}
	s, _ := q.Stats()
	if s.Counts[Pending][movement.Ordinary] != 1 || s.Counts[Pending][movement.Controlled] != 1 {
		t.Fatalf("counts = %v", s.Counts)
	}
	verify(t, q)
}

func TestGroupCommitBatchesConcurrentSubmitters(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	const workers, each = 64, 20
	var wg stdsync.WaitGroup
	var failed atomic.Int32
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := q.Enqueue([]movement.Prepared{mv(t, fmt.Sprintf("w%d-%d", w, i), 0, "")}); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d submissions failed", failed.Load())
	}
	s, _ := q.Stats()
	if got := s.Count(Pending); got != workers*each {
		t.Fatalf("pending = %d, want %d", got, workers*each)
	}
	commits := q.Commits()
	t.Logf("%d submissions in %d commits", workers*each, commits)
	if commits >= workers*each {
		t.Fatalf("%d commits for %d concurrent submissions: no grouping", commits, workers*each)
	}
	verify(t, q)
}

func TestLeaseSyncRetryQuarantineRedrivePurge(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	var items []movement.Prepared
	for i := 0; i < 5; i++ {
		items = append(items, mv(t, fmt.Sprintf("M%d", i), 0, ""))
	}
	if _, err := q.Enqueue(items); err != nil {
		t.Fatal(err)
	}

	got, err := q.Lease(clk.Now(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Seq != 1 || got[2].Seq != 3 {
		t.Fatalf("lease = %v, want seqs 1..3 in order", seqsOf(got))
	}
	more, _ := q.Lease(clk.Now(), 10)
	if len(more) != 2 || more[0].Seq != 4 {
		t.Fatalf("second lease = %v, want 4,5 (leased ones skipped)", seqsOf(more))
	}

	// 1 synced, 2 retried, 3 quarantined, 4 and 5 released.
	if err := q.MarkSynced([]Ack{{Seq: 1, StreamSeq: 77}}); err != nil {
		t.Fatal(err)
	}
	e, _ := q.Get(items[0].Key)
	if e.State != Synced || e.StreamSeq != 77 || e.Record != nil {
		t.Fatalf("after MarkSynced: %+v", e)
	}
	if err := q.Retry([]RetryAt{{Seq: 2, Failure: Failure{Kind: "transient:timeout", Text: "ack timeout"}, Delay: 10 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if err := q.Quarantine([]QuarantineAt{{Seq: 3, Failure: Failure{Kind: "permanent:too_large", Text: "maximum payload exceeded"}, Reason: "permanent:too_large", Charge: true, ConnState: "online", AgentVersion: "test"}}); err != nil {
		t.Fatal(err)
	}
	q.Release(4, 5)
	if n := q.Leased(); n != 0 {
		t.Fatalf("%d still leased", n)
	}

	due, _ := q.Lease(clk.Now(), 10)
	if s := seqsOf(due); fmt.Sprint(s) != "[4 5]" {
		t.Fatalf("due now = %v, want [4 5] (2 waits its delay)", s)
	}
	q.Release(4, 5)
	clk.Add(10 * time.Second)
	due, _ = q.Lease(clk.Now(), 10)
	if s := seqsOf(due); fmt.Sprint(s) != "[4 5 2]" {
		t.Fatalf("due after delay = %v, want [4 5 2]", s)
	}
	if r := due[2]; r.Attempts != 1 || r.LastErrKind != "transient:timeout" || len(r.Delays) != 1 || r.Delays[0] != 10*time.Second {
		t.Fatalf("retried record = %+v", r)
	}
	q.Release(2, 4, 5)

	e, _ = q.Get(items[3-1].Key)
	if e.State != Quarantined || e.Record.Quarantine == nil || e.Record.Quarantine.Reason != "permanent:too_large" || e.Record.Attempts != 1 {
		t.Fatalf("quarantined entry = %+v / %+v", e, e.Record)
	}
	verify(t, q)

	// Redrive needs a reason; then back to pending with attempts reset, same seq.
	if _, err := q.Redrive(Redrive{Keys: [][16]byte{items[2].Key}}); !errors.Is(err, ErrNoReason) {
		t.Fatalf("redrive without reason: %v", err)
	}
	unknown := [16]byte{1}
	res, err := q.Redrive(Redrive{Keys: [][16]byte{items[2].Key, unknown}, Actor: "local:test", Reason: "limit raised"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Redriven) != 1 || len(res.NotFound) != 1 || res.NotFound[0] != unknown {
		t.Fatalf("redrive result = %+v", res)
	}
	e, _ = q.Get(items[2].Key)
	if e.State != Pending || e.Seq != 3 || e.Record.Attempts != 0 || e.Record.Quarantine != nil {
		t.Fatalf("redriven entry = %+v / %+v", e, e.Record)
	}
	verify(t, q)

	// Quarantine again, then purge: the key can neither be redriven nor resubmitted.
	l, _ := q.Lease(clk.Now(), 10)
	for _, r := range l {
		if r.Seq != 3 {
			q.Release(r.Seq)
		}
	}
	if err := q.Quarantine([]QuarantineAt{{Seq: 3, Reason: "permanent:too_large"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Purge(Purge{Keys: [][16]byte{items[2].Key}, Actor: "local:test"}); !errors.Is(err, ErrNoReason) {
		t.Fatalf("purge without reason: %v", err)
	}
	pr, err := q.Purge(Purge{Keys: [][16]byte{items[2].Key}, Actor: "local:test", Reason: "duplicate of a paper record"})
	if err != nil || len(pr.Purged) != 1 {
		t.Fatalf("purge = %+v, %v", pr, err)
	}
	res, _ = q.Redrive(Redrive{Keys: [][16]byte{items[2].Key}, Actor: "local:test", Reason: "try"})
	if len(res.Redriven) != 0 || len(res.NotFound) != 1 {
		t.Fatalf("purged key redriven: %+v", res)
	}
	var pe *PurgedError
	if _, err := q.Enqueue([]movement.Prepared{items[2]}); !errors.As(err, &pe) {
		t.Fatalf("resubmitting a purged movement: %v", err)
	}
	verify(t, q)

	var actions []string
	q.Events(time.Time{}, func(e Event) bool {
		actions = append(actions, e.Action+":"+e.Actor)
		return true
	})
	want := "[quarantine:agent redrive:local:test quarantine:agent purge:local:test]"
	if fmt.Sprint(actions) != want {
		t.Fatalf("journal = %v, want %s", actions, want)
	}
}

func seqsOf(rs []*Record) []uint64 {
	var s []uint64
	for _, r := range rs {
		s = append(s, r.Seq)
	}
	return s
}

func TestLeasePullsInDueTimesAfterClockJumpsBack(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	if _, err := q.Enqueue([]movement.Prepared{mv(t, "A", 0, ""), mv(t, "B", 0, "")}); err != nil {
		t.Fatal(err)
	}
	l, _ := q.Lease(clk.Now(), 2)
	if err := q.Retry([]RetryAt{{Seq: l[0].Seq, Delay: 20 * time.Second}, {Seq: l[1].Seq, Delay: 25 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if l, _ := q.Lease(clk.Now(), 10); len(l) != 0 {
		t.Fatalf("leased %v before their delay", seqsOf(l))
	}
	// The wall clock is set back a day: the due times are now a day ahead,
	// further than any retry delay, and must not wait a day.
	back := clk.Now().Add(-24 * time.Hour)
	l, _ = q.Lease(back, 10)
	if len(l) != 2 {
		t.Fatalf("after the clock jumped back, leased %v, want both", seqsOf(l))
	}
	if next, _ := q.NextDue(back); !next.IsZero() {
		t.Fatalf("NextDue with everything leased = %v", next)
	}
}

func TestRedriveSpreadsDueTimesOverTheWindow(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	var keys [][16]byte
	var items []movement.Prepared
	for i := 0; i < 200; i++ {
		p := mv(t, fmt.Sprintf("M%d", i), 0, "")
		items = append(items, p)
		keys = append(keys, p.Key)
	}
	if _, err := q.Enqueue(items); err != nil {
		t.Fatal(err)
	}
	l, _ := q.Lease(clk.Now(), 1000)
	var qs []QuarantineAt
	for _, r := range l {
		qs = append(qs, QuarantineAt{Seq: r.Seq, Reason: "exhausted:timeout"})
	}
	if err := q.Quarantine(qs); err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	const window = time.Hour
	var calls int
	res, err := q.Redrive(Redrive{Keys: keys, Actor: "local:test", Reason: "central back", Spread: window,
		Rand: func() float64 { calls++; return float64(calls%100) / 100 }})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Redriven {
		if r.DueAt.Before(start) || !r.DueAt.Before(start.Add(window)) {
			t.Fatalf("due %v outside [%v, %v)", r.DueAt, start, start.Add(window))
		}
	}
	// Spread due times are legitimately far ahead: they are not pulled in.
	if l, _ := q.Lease(clk.Now(), 1000); len(l) != 2 {
		t.Fatalf("leased %d right after a spread redrive, want the 2 due at once", len(l))
	}
	verify(t, q)
}

func TestReopenKeepsEverything(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q, err := Open(Options{Path: path, StoreID: testStore, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	a := mv(t, "A", 0, "CIV")
	if _, err := q.Enqueue([]movement.Prepared{a}); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := q.Enqueue([]movement.Prepared{a}); !errors.Is(err, ErrClosed) {
		t.Fatalf("enqueue after close: %v", err)
	}

	if _, err := Open(Options{Path: path, StoreID: "S9999"}); !errors.Is(err, ErrStoreMismatch) {
		t.Fatalf("open for another store: %v", err)
	}

	q = openTest(t, path, clk)
	e, err := q.Get(a.Key)
	if err != nil || e.State != Pending || string(e.Record.Payload) != string(a.Payload) {
		t.Fatalf("after reopen: %+v, %v", e, err)
	}
	// A second opener times out on the lock instead of waiting forever.
	start := time.Now()
	_, err = Open(Options{Path: path, ReadOnly: true, LockTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("lock wait was not bounded")
	}
	q.Close()

	ro, err := Open(Options{Path: path, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	s, err := ro.Stats()
	if err != nil || s.Counts[Pending][movement.Controlled] != 1 || s.StoreID != testStore {
		t.Fatalf("read-only stats = %+v, %v", s, err)
	}
	if _, err := ro.Enqueue([]movement.Prepared{a}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("write to read-only queue: %v", err)
	}
}

func TestMigrationHookRunsOnOlderSchema(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openTest(t, path, clk)
	q.Close()

	// Make the file look like it was written by schema version 0.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaSchema, u64(0)) })
	db.Close()

	if _, err := Open(Options{Path: path, StoreID: testStore}); err == nil {
		t.Fatal("opened an old schema with no migration")
	}
	ran := false
	q2, err := Open(Options{Path: path, StoreID: testStore, Migrations: []Migration{{From: 0, Up: func(tx *bolt.Tx) error {
		ran = true
		return nil
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	s, _ := q2.Stats()
	if !ran || s.SchemaVersion != SchemaVersion {
		t.Fatalf("migration ran %v, schema now %d", ran, s.SchemaVersion)
	}
}

func TestPruneDropsOldSyncedKeysAndJournal(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	a, b := mv(t, "A", 0, ""), mv(t, "B", 0, "")
	q.Enqueue([]movement.Prepared{a, b})
	l, _ := q.Lease(clk.Now(), 2)
	q.MarkSynced([]Ack{{Seq: l[0].Seq, StreamSeq: 1}})
	q.Journal(Event{Action: ActionStart, Actor: ActorAgent})
	clk.Add(31 * 24 * time.Hour)
	q.MarkSynced([]Ack{{Seq: l[1].Seq, StreamSeq: 2}})

	n, err := q.Prune(30*24*time.Hour, 730*24*time.Hour, 1000)
	if err != nil || n != 1 {
		t.Fatalf("prune = %d, %v; want 1", n, err)
	}
	if _, err := q.Get(a.Key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old synced key kept: %v", err)
	}
	if e, _ := q.Get(b.Key); e.State != Synced {
		t.Fatalf("recent synced key: %+v", e)
	}
	s, _ := q.Stats()
	if s.Count(Synced) != 1 || s.SyncedTotal != 2 {
		t.Fatalf("stats after prune = %+v", s)
	}
	clk.Add(731 * 24 * time.Hour)
	if n, _ := q.Prune(0, 730*24*time.Hour, 1000); n != 1 {
		t.Fatalf("journal prune removed %d, want 1", n)
	}
	verify(t, q)
}

func TestEventsSinceReadsOnlyTheTail(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	start := clk.Now()
	for i := 0; i < 5; i++ {
		if err := q.Journal(Event{Action: ActionStart, Actor: ActorAgent, Reason: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Hour)
	}
	var got []string
	q.Events(start.Add(2*time.Hour), func(e Event) bool { got = append(got, e.Reason); return true })
	if fmt.Sprint(got) != "[2 3 4]" {
		t.Fatalf("events since the third = %v", got)
	}
	got = nil
	q.Events(time.Time{}, func(e Event) bool { got = append(got, e.Reason); return len(got) < 2 })
	if fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("all events, stopping after two = %v", got)
	}
	got = nil
	q.Events(start.Add(10*time.Hour), func(e Event) bool { got = append(got, e.Reason); return true })
	if len(got) != 0 {
		t.Fatalf("events after the last = %v", got)
	}
}

func TestCloseConcurrentlyAndUnderLoad(t *testing.T) {
	clk := newClock()
	q, err := Open(Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: testStore, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	var wg stdsync.WaitGroup
	var stored atomic.Int32
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				if _, err := q.Enqueue([]movement.Prepared{mv(t, fmt.Sprintf("c%d-%d", w, i), 0, "")}); err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("enqueue: %v", err)
					}
					return
				}
				stored.Add(1)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() { errs <- q.Close() }()
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	wg.Wait()
	q = openTest(t, q.Path(), clk)
	s, _ := q.Stats()
	if s.Count(Pending) != uint64(stored.Load()) {
		t.Fatalf("%d pending after close, %d acknowledged", s.Count(Pending), stored.Load())
	}
	verify(t, q)
}

func TestEnqueueEachRefusesMovementsOnTheirOwn(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	if _, err := q.Enqueue([]movement.Prepared{mv(t, "A", 0, ""), mv(t, "P", 0, "")}); err != nil {
		t.Fatal(err)
	}
	l, err := q.Lease(clk.Now(), 10)
	if err != nil || len(l) != 2 || l[1].MovementID != "P" {
		t.Fatalf("lease %v %v", l, err)
	}
	q.Release(l[0].Seq)
	if err := q.Quarantine([]QuarantineAt{{Seq: l[1].Seq, Reason: "permanent:too_large"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Purge(Purge{Keys: [][16]byte{l[1].Key}, Actor: "test", Reason: "test"}); err != nil {
		t.Fatal(err)
	}

	items := []movement.Prepared{
		mv(t, "A", 1, ""),    // 0: conflicts with the pending A
		mv(t, "B", 0, ""),    // 1: stored
		mv(t, "P", 0, ""),    // 2: purged
		mv(t, "B", 1, ""),    // 3: conflicts with item 1
		mv(t, "A", 0, ""),    // 4: duplicate of the pending A
		mv(t, "C", 1, "CII"), // 5: stored
		mv(t, "B", 0, ""),    // 6: duplicate of item 1
		mv(t, "D", 0, ""),    // 7: stored
		mv(t, "D", 1, ""),    // 8: conflicts with item 7
		mv(t, "D", 1, ""),    // 9: conflicts with item 7, not a duplicate of item 8
	}
	commits := q.Commits()
	res, err := q.EnqueueEach(items)
	if err != nil {
		t.Fatal(err)
	}
	if n := q.Commits() - commits; n != 1 {
		t.Fatalf("%d commits, want 1", n)
	}
	var got []string
	for i, r := range res {
		var ce *ConflictError
		var pe *PurgedError
		switch {
		case errors.As(r.Err, &ce) && ce.State == 0:
			got = append(got, fmt.Sprintf("conflict %d with %d", ce.Index, ce.Other))
		case errors.As(r.Err, &ce):
			got = append(got, fmt.Sprintf("conflict %d with %s", ce.Index, ce.State))
		case errors.As(r.Err, &pe):
			got = append(got, fmt.Sprintf("purged %d", pe.Index))
		case r.Err != nil:
			t.Fatalf("item %d: %v", i, r.Err)
		case r.Duplicate:
			got = append(got, fmt.Sprintf("duplicate seq %d", r.Seq))
		default:
			got = append(got, fmt.Sprintf("stored seq %d", r.Seq))
		}
		if r.Key != items[i].Key {
			t.Fatalf("item %d: key %x, want %x", i, r.Key, items[i].Key)
		}
		if r.Err != nil && r.Seq != 0 {
			t.Fatalf("refused item %d has seq %d", i, r.Seq)
		}
	}
	want := []string{
		"conflict 0 with pending", "stored seq 3", "purged 2", "conflict 3 with 1", "duplicate seq 1",
		"stored seq 4", "duplicate seq 3", "stored seq 5", "conflict 8 with 7", "conflict 9 with 7",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("results\n%q\nwant\n%q", got, want)
	}
	for _, it := range []movement.Prepared{items[1], items[5], items[7]} {
		if e, err := q.Get(it.Key); err != nil || e.Digest != it.Digest || e.State != Pending {
			t.Fatalf("%s held as %+v (%v), want pending with the submitted content", it.MovementID, e, err)
		}
	}
	if e, _ := q.Get(items[0].Key); e.Digest == items[0].Digest {
		t.Fatal("a refused movement replaced the held one")
	}
	s, _ := q.Stats()
	if s.Counts[Pending][movement.Ordinary] != 3 || s.Counts[Pending][movement.Controlled] != 1 || s.Count(Purged) != 1 {
		t.Fatalf("counts %v", s.Counts)
	}
	verify(t, q)
}

// TestOtherSpellingIsADuplicate resubmits a movement with its NDC in
// other spellings, while pending, once synced, and within one submission:
// each is a duplicate of the first, which keeps its spelling and digest.
// Another quantity is still a conflict.
func TestOtherSpellingIsADuplicate(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	spelled := func(id, ndc string, qty int) movement.Prepared {
		js := fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":%q,"quantity":%d,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z","schedule":"CII"}`, id, ndc, qty)
		p, es := movement.Prepare([]byte(js), testStore, clk.Now())
		if es != nil {
			t.Fatalf("prepare %s: %v", id, es)
		}
		return p
	}
	first := spelled("A", "00591054001", 60)
	if _, err := q.Enqueue([]movement.Prepared{first, spelled("B", "0591-0540-01", 1), spelled("B", "00591-0540-01", 1)}); err != nil {
		t.Fatalf("the same movement in two spellings in one submission: %v", err)
	}
	check := func(when string) {
		t.Helper()
		for _, ndc := range []string{"0591-0540-01", "00591-0540-01", "00591054001"} {
			res, err := q.Enqueue([]movement.Prepared{spelled("A", ndc, 60)})
			if err != nil || !res[0].Duplicate || res[0].Seq != 1 {
				t.Fatalf("%s: %s again = %+v, %v; want a duplicate of seq 1", when, ndc, res, err)
			}
		}
		var ce *ConflictError
		if _, err := q.Enqueue([]movement.Prepared{spelled("A", "0591-0540-01", 61)}); !errors.As(err, &ce) {
			t.Fatalf("%s: another quantity in another spelling: %v, want a conflict", when, err)
		}
		if e, _ := q.Get(first.Key); e.Digest != first.Digest {
			t.Fatalf("%s: the stored digest changed", when)
		}
	}
	check("pending")
	if err := q.MarkSynced([]Ack{{Seq: 1, StreamSeq: 1}}); err != nil {
		t.Fatal(err)
	}
	check("synced")
	verify(t, q)
}
