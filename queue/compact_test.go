package queue

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

// fixture describes a data file for compaction tests. Filler movements are
// enqueued, synced and pruned before the others, so their pages end up
// free.
type fixture struct {
	filler, pending, synced, quarantined int
	noteLen                              int // bytes of note per movement, to give records some weight
	fillerNoteLen                        int // the same for filler movements; default noteLen
}

// build writes the fixture to path with a test clock and returns the file
// size.
func (f fixture) build(t testing.TB, path string) int64 {
	t.Helper()
	clk := newClock()
	q, err := Open(Options{Path: path, StoreID: testStore, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	enqueue := func(prefix string, n, noteLen int) []uint64 {
		note := strings.Repeat("n", noteLen)
		var seqs []uint64
		for lo := 0; lo < n; lo += 1000 {
			var items []movement.Prepared
			for i := lo; i < min(lo+1000, n); i++ {
				sched := ""
				if i%7 == 0 {
					sched = `,"schedule":"CII"`
				}
				js := fmt.Sprintf(`{"movement_id":"%s-%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z","note":%q%s}`, prefix, i, note, sched)
				p, es := movement.Prepare([]byte(js), testStore, clk.Now())
				if es != nil {
					t.Fatalf("prepare: %v", es)
				}
				items = append(items, p)
			}
			res, err := q.Enqueue(items)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				seqs = append(seqs, r.Seq)
			}
		}
		return seqs
	}
	sync := func(seqs []uint64) {
		for lo := 0; lo < len(seqs); lo += 5000 {
			var acks []Ack
			for _, s := range seqs[lo:min(lo+5000, len(seqs))] {
				acks = append(acks, Ack{Seq: s, StreamSeq: s + 1000})
			}
			if err := q.MarkSynced(acks); err != nil {
				t.Fatal(err)
			}
		}
	}

	if f.fillerNoteLen == 0 {
		f.fillerNoteLen = f.noteLen
	}
	sync(enqueue("filler", f.filler, f.fillerNoteLen))
	clk.Add(time.Hour)
	kept := enqueue("kept", f.pending+f.synced+f.quarantined, f.noteLen)
	sync(kept[:f.synced])
	var qs []QuarantineAt
	for _, s := range kept[f.synced : f.synced+f.quarantined] {
		qs = append(qs, QuarantineAt{Seq: s, Reason: "permanent:too_large", Failure: Failure{Kind: "permanent:too_large", Text: "maximum payload exceeded"}})
	}
	if err := q.Quarantine(qs); err != nil {
		t.Fatal(err)
	}
	var retries []RetryAt
	for _, s := range kept[f.synced+f.quarantined:][:min(100, f.pending)] {
		retries = append(retries, RetryAt{Seq: s, Delay: time.Second, Failure: Failure{Kind: "transient:timeout", Text: "timeout"}})
	}
	if err := q.Retry(retries); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := q.Prune(30*time.Minute, 0, 20000)
		if err != nil {
			t.Fatal(err)
		}
		if n < 20000 {
			break
		}
	}
	if err := q.Journal(Event{Action: ActionStart, Actor: ActorAgent, Detail: map[string]string{"fixture": "yes"}}); err != nil {
		t.Fatal(err)
	}
	verify(t, q)
	s, err := q.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Count(Pending) + s.Count(Synced) + s.Count(Quarantined); got != uint64(f.pending+f.synced+f.quarantined) {
		t.Fatalf("fixture holds %d keys, want %d", got, f.pending+f.synced+f.quarantined)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// snapshot is the logical content of a data file: a digest of every
// bucket but the journal (keys, values, sequences), and the journal's
// entries.
type snapshot struct {
	digests map[string][32]byte
	journal [][]byte
	keys    map[[16]byte]State
}

func takeSnapshot(t testing.TB, path string) snapshot {
	t.Helper()
	q, err := Open(Options{Path: path, ReadOnly: true})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer q.Close()
	s := snapshot{digests: map[string][32]byte{}, keys: map[[16]byte]State{}}
	err = q.db.View(func(tx *bolt.Tx) error {
		err := buckets(tx).keys.ForEach(func(k, v []byte) error {
			e, err := unmarshalKeyEntry(v)
			if err != nil {
				return err
			}
			s.keys[[16]byte(k)] = e.State
			return nil
		})
		if err != nil {
			return err
		}
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if bytes.Equal(name, bucketJournal) {
				return b.ForEach(func(_, v []byte) error {
					s.journal = append(s.journal, bytes.Clone(v))
					return nil
				})
			}
			h := sha256.New()
			fmt.Fprintf(h, "seq %d\n", b.Sequence())
			err := b.ForEach(func(k, v []byte) error {
				h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(k))))
				h.Write(k)
				h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(v))))
				h.Write(v)
				return nil
			})
			s.digests[string(name)] = [32]byte(h.Sum(nil))
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sameAs reports how got differs from want, the snapshot before
// compactions: every bucket identical, the journal extended only by
// compaction entries.
func (got snapshot) sameAs(want snapshot) error {
	if len(got.keys) != len(want.keys) {
		return fmt.Errorf("%d keys, want %d", len(got.keys), len(want.keys))
	}
	for k, st := range want.keys {
		if got.keys[k] != st {
			return fmt.Errorf("key %x is %v, want %v", k, got.keys[k], st)
		}
	}
	for name, d := range want.digests {
		if got.digests[name] != d {
			return fmt.Errorf("bucket %s differs", name)
		}
	}
	if len(got.digests) != len(want.digests) {
		return fmt.Errorf("%d buckets, want %d", len(got.digests), len(want.digests))
	}
	if len(got.journal) < len(want.journal) {
		return fmt.Errorf("%d journal events, want at least %d", len(got.journal), len(want.journal))
	}
	for i, v := range want.journal {
		if !bytes.Equal(got.journal[i], v) {
			return fmt.Errorf("journal event %d differs", i)
		}
	}
	for _, v := range got.journal[len(want.journal):] {
		var e Event
		if err := json.Unmarshal(v, &e); err != nil || e.Action != ActionCompact {
			return fmt.Errorf("unexpected journal event %s", v)
		}
	}
	return nil
}

func copyFileForTest(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func noLeftover(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path + CompactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s%s exists (err %v), want it removed", path, CompactSuffix, err)
	}
}

func TestCompactShrinksDrainedFileAndKeepsEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	before := fixture{filler: 20000, pending: 300, synced: 500, quarantined: 40, noteLen: 200}.build(t, path)
	want := takeSnapshot(t, path)
	sp, err := space(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if sp.FileSize != before || sp.FreeFraction() < 0.5 {
		t.Fatalf("space of the drained file = %+v (fraction %.2f), want file size %d, more than half free", sp, sp.FreeFraction(), before)
	}

	var calls, last int64
	res, err := Compact(path, CompactOptions{Actor: "local:test", Reason: "unit test", Progress: func(done, total int64) {
		calls++
		if done < last || done > total {
			t.Errorf("progress %d/%d after %d", done, total, last)
		}
		last = done
	}})
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	t.Logf("compacted %d → %d bytes (%.1f%%) in %s", res.Before, res.After, 100*res.Ratio(), res.Duration)
	if res.Before != before || res.After >= before/4 {
		t.Errorf("result %+v, want before %d and after under a quarter of it", res, before)
	}
	if calls < 2 {
		t.Errorf("progress called %d times", calls)
	}
	noLeftover(t, path)
	got := takeSnapshot(t, path)
	if err := got.sameAs(want); err != nil {
		t.Fatalf("after compaction: %v", err)
	}

	q, err := Open(Options{Path: path, StoreID: testStore})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	verify(t, q)
	var evs []Event
	q.Events(time.Time{}, func(e Event) bool {
		if e.Action == ActionCompact {
			evs = append(evs, e)
		}
		return true
	})
	if len(evs) != 1 || evs[0].Actor != "local:test" || evs[0].Reason != "unit test" ||
		evs[0].Detail["before_bytes"] != fmt.Sprint(res.Before) || evs[0].Detail["after_bytes"] != fmt.Sprint(res.After) {
		t.Fatalf("journal compact events = %+v", evs)
	}
	// The compacted file is a working queue: its counters, sequences and
	// journal sequence carry on.
	st, _ := q.Stats()
	if st.Count(Pending) != 300 || st.Count(Synced) != 500 || st.Count(Quarantined) != 40 || st.NextSeq != 20000+840+1 {
		t.Fatalf("stats after compaction = %+v", st)
	}
	res2, err := q.Enqueue([]movement.Prepared{mv(t, "after-compaction", 0, "")})
	if err != nil || res2[0].Seq != 20000+840+1 {
		t.Fatalf("enqueue after compaction = %+v, %v", res2, err)
	}
	verify(t, q)
}

func TestCompactRefusesWhileLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openTest(t, path, newClock())
	if _, err := q.Enqueue([]movement.Prepared{mv(t, "A", 0, "")}); err != nil {
		t.Fatal(err)
	}
	_, err := Compact(path, CompactOptions{LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Compact of a file in use = %v, want ErrLocked", err)
	}
	noLeftover(t, path)
	if _, _, err := CompactionNeeded(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("CompactionNeeded of a file in use = %v, want ErrLocked", err)
	}
	verify(t, q)
}

func TestCompactRemovesLeftover(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.db")
	fixture{filler: 100, pending: 10, synced: 10}.build(t, path)
	want := takeSnapshot(t, path)
	if err := os.WriteFile(path+CompactSuffix, []byte("half a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := CompactionNeeded(path); err != nil {
		t.Fatal(err)
	}
	noLeftover(t, path)

	if err := os.WriteFile(path+CompactSuffix, []byte("half a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Compact(path, CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	noLeftover(t, path)
	if err := takeSnapshot(t, path).sameAs(want); err != nil {
		t.Fatal(err)
	}
}

func TestCompactRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := Compact(filepath.Join(dir, "missing.db"), CompactOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Compact of a missing file = %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Compact created the missing file")
	}
	if need, _, err := CompactionNeeded(filepath.Join(dir, "missing.db")); need || err != nil {
		t.Errorf("CompactionNeeded of a missing file = %v, %v", need, err)
	}
	other := filepath.Join(dir, "other.db")
	db, err := bolt.Open(other, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("x")); return err })
	db.Close()
	if _, err := Compact(other, CompactOptions{}); err == nil || !strings.Contains(err.Error(), "not an agent data file") {
		t.Errorf("Compact of another bbolt file = %v", err)
	}
	noLeftover(t, other)
}

func TestCompactionThresholds(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name string
		sp   Space
		want bool
	}{
		{"empty", Space{}, false},
		{"small file mostly free", Space{FileSize: 60 * mib, InUse: 1 * mib, Free: 59 * mib}, false},
		{"large file, a third free", Space{FileSize: 600 * mib, InUse: 400 * mib, Free: 200 * mib}, false},
		{"exactly half free", Space{FileSize: 256 * mib, InUse: 128 * mib, Free: 128 * mib}, false},
		{"exactly 64 MiB free", Space{FileSize: 100 * mib, InUse: 36 * mib, Free: 64 * mib}, false},
		{"drained", Space{FileSize: 1024 * mib, InUse: 40 * mib, Free: 984 * mib}, true},
		{"just over both", Space{FileSize: 128*mib + 2, InUse: 64*mib - 1, Free: 64*mib + 3}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.sp.worthCompacting(); got != tt.want {
				t.Errorf("worthCompacting(%+v) = %v, want %v", tt.sp, got, tt.want)
			}
		})
	}
}

// A process that opened the data file before a compaction replaced it, and
// waited for its lock, must not write into the replaced file where nobody
// would read its writes: Open notices and opens the new file.
// An agent knows its store id; a CLI command may not.
func TestCompactWaiterDoesNotWriteToReplacedFile(t *testing.T) {
	for _, storeID := range []string{testStore, ""} {
		name := "store id " + storeID
		if storeID == "" {
			name = "no store id"
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.db")
			fixture{filler: 2000, pending: 10, synced: 10}.build(t, path)

			type opened struct {
				q   *Queue
				err error
			}
			waiter := make(chan opened, 1)
			hook := func(phase string) {
				if phase != phaseVerified {
					return
				}
				go func() {
					q, err := Open(Options{Path: path, StoreID: storeID, LockTimeout: 20 * time.Second})
					waiter <- opened{q, err}
				}()
				// Give the waiter time to open the old file and block on
				// its lock; there is no event to wait for.
				time.Sleep(300 * time.Millisecond)
			}
			if _, err := Compact(path, CompactOptions{hook: hook, LockTimeout: 20 * time.Second}); err != nil && !errors.Is(err, ErrNotJournaled) {
				t.Fatal(err)
			}
			// The waiter locked the replaced file; Open must notice and
			// open the new one.
			w := <-waiter
			if w.err != nil {
				t.Fatalf("the waiter could not open the data file after the compaction: %v", w.err)
			}
			defer w.q.Close()
			id := mv(t, "written-by-waiter", 0, "")
			if _, err := w.q.Enqueue([]movement.Prepared{id}); err != nil {
				t.Fatal(err)
			}
			w.q.Close()
			q := openTest(t, path, newClock())
			if _, err := q.Get(id.Key); err != nil {
				t.Fatalf("a movement acknowledged by the waiter is not in the data file: %v", err)
			}
		})
	}
}

// TestCompactDrainedMillion measures the shrink after a backlog of a
// million movements was delivered: the keys stay (synced, for the dedupe
// horizon) while the payloads are gone, and then after the keys are
// pruned too. Set RXEDGE_COMPACT_MILLION=1 to run it.
func TestCompactDrainedMillion(t *testing.T) {
	if os.Getenv("RXEDGE_COMPACT_MILLION") == "" {
		t.Skip("set RXEDGE_COMPACT_MILLION=1 to measure compaction after draining a million movements")
	}
	path := filepath.Join(t.TempDir(), "agent.db")
	clk := newClock()
	q := openTest(t, path, clk)
	const n = 1_000_000
	var seqs []uint64
	for lo := 0; lo < n; lo += 1000 {
		items := make([]movement.Prepared, 0, 1000)
		for i := lo; i < lo+1000; i++ {
			items = append(items, mv(t, fmt.Sprintf("POS-%07d", i), 0, ""))
		}
		res, err := q.Enqueue(items)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			seqs = append(seqs, r.Seq)
		}
	}
	peak, _ := os.Stat(path)
	for lo := 0; lo < n; lo += 1000 {
		acks := make([]Ack, 0, 1000)
		for _, s := range seqs[lo : lo+1000] {
			acks = append(acks, Ack{Seq: s, StreamSeq: s})
		}
		if err := q.MarkSynced(acks); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	measure := func(label string) {
		need, sp, err := CompactionNeeded(path)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Compact(path, CompactOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d → %d bytes (%.1f%% of before, %.1fx smaller) in %s; %.0f%% was free, automatic compaction %v",
			label, res.Before, res.After, 100*res.Ratio(), 1/res.Ratio(), res.Duration.Round(time.Millisecond), 100*sp.FreeFraction(), need)
	}
	t.Logf("peak file with %d pending: %d bytes", n, peak.Size())
	measure("drained, synced keys kept for the dedupe horizon")

	q = openTest(t, path, clk)
	clk.Add(31 * 24 * time.Hour)
	for {
		m, err := q.Prune(30*24*time.Hour, 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		if m < 100000 {
			break
		}
	}
	verify(t, q)
	q.Close()
	measure("drained and the keys pruned past the horizon")
}
