package queue

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

func openLineage(t *testing.T, path string, clk *clock) *Queue {
	t.Helper()
	q, err := Open(Options{Path: path, StoreID: testStore, Clock: clk.Now, Lineage: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func enqueueN(t *testing.T, q *Queue, prefix string, n int) []Result {
	t.Helper()
	items := make([]movement.Prepared, n)
	for i := range items {
		items[i] = mv(t, fmt.Sprintf("%s-%d", prefix, i), 0, "")
	}
	res, err := q.Enqueue(items)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func syncAll(t *testing.T, q *Queue, now time.Time) int {
	t.Helper()
	l, err := q.Lease(now, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	acks := make([]Ack, len(l))
	for i, r := range l {
		acks[i] = Ack{Seq: r.Seq, StreamSeq: r.Seq}
	}
	if err := q.MarkSynced(acks); err != nil {
		t.Fatal(err)
	}
	return len(l)
}

func lineageEvents(t *testing.T, q *Queue) []Event {
	t.Helper()
	var out []Event
	q.Events(time.Time{}, func(e Event) bool {
		if e.Action == ActionLineage {
			out = append(out, e)
		}
		return true
	})
	return out
}

// TestNewFileHasIdentity: a new file gets a random identity in the
// transaction that creates it and keeps it across opens.
func TestNewFileHasIdentity(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openTest(t, path, clk)
	l := q.Lineage()
	if _, err := uuid.Parse(l.FileID); err != nil || l.Origin != OriginNew {
		t.Fatalf("lineage of a new file = %+v (%v)", l, err)
	}
	q.Close()
	q2 := openTest(t, path, clk)
	if got := q2.Lineage().FileID; got != l.FileID {
		t.Fatalf("identity changed across opens: %s, then %s", l.FileID, got)
	}
	other := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	if other.Lineage().FileID == l.FileID {
		t.Fatal("two files got the same identity")
	}
}

// TestMigrationGivesIdentity: a file written by schema 1 (no identity)
// keeps every movement, gets an identity at its first open, journalled,
// and is at the current schema.
func TestMigrationGivesIdentity(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openTest(t, path, clk)
	enqueueN(t, q, "m", 5)
	syncAll(t, q, clk.Now())
	enqueueN(t, q, "p", 3)
	q.Close()
	// Make it a schema 1 file: no identity.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		for _, k := range [][]byte{metaFileID, metaFileOrigin, metaFilePrev, metaFileBase, metaFileAt} {
			m.Delete(k)
		}
		return m.Put(metaSchema, u64(1))
	})
	db.Close()
	if id, _, err := FileIDOf(path); err != nil || id != "" {
		t.Fatalf("schema 1 file has identity %q (%v)", id, err)
	}

	q2 := openTest(t, path, clk)
	l := q2.Lineage()
	if _, err := uuid.Parse(l.FileID); err != nil || l.Origin != OriginMigrated {
		t.Fatalf("lineage after migration = %+v", l)
	}
	s, _ := q2.Stats()
	if s.SchemaVersion != SchemaVersion || s.Count(Pending) != 3 || s.Count(Synced) != 5 {
		t.Fatalf("after migration: schema %d, pending %d, synced %d", s.SchemaVersion, s.Count(Pending), s.Count(Synced))
	}
	ev := lineageEvents(t, q2)
	if last := ev[len(ev)-1]; last.Detail["origin"] != OriginMigrated || last.Detail["file"] != l.FileID || last.Detail["last_seq"] != "8" {
		t.Fatalf("migration journal entry = %+v", last)
	}
}

// TestReplacedFileContinuesAfterCentral: a new file that accepted
// movements before central answered holds them back, then gives them the
// sequences after central's highest, naming the file it replaces.
func TestReplacedFileContinuesAfterCentral(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openLineage(t, path, clk)
	res := enqueueN(t, q, "n", 4)
	if res[0].Seq != 1 || res[3].Seq != 4 {
		t.Fatalf("seqs %d..%d", res[0].Seq, res[3].Seq)
	}
	if l, _ := q.Lease(clk.Now(), 10); len(l) != 0 {
		t.Fatalf("leased %d movements before central's record was known", len(l))
	}
	if n, _ := q.DueCount(clk.Now(), 10); n != 0 {
		t.Fatalf("due count %d before confirmation", n)
	}
	// A restart before central answered keeps them held.
	q.Close()
	q = openLineage(t, path, clk)
	if l, _ := q.Lease(clk.Now(), 10); len(l) != 0 {
		t.Fatalf("leased %d held movements after a restart", len(l))
	}
	c, err := q.Confirm(CentralRecord{Highest: 1050, FileID: "old-file"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Behind || c.Renumbered != 4 || c.Origin != OriginReplaced || c.Prev != "old-file" || c.Base != 1050 || !c.Confirmed() {
		t.Fatalf("confirmation = %+v", c)
	}
	l, _ := q.Lease(clk.Now(), 10)
	if len(l) != 4 || l[0].Seq != 1051 || l[3].Seq != 1054 {
		t.Fatalf("after confirmation leased %d, first %d", len(l), l[0].Seq)
	}
	for _, r := range l {
		if e, _ := q.Get(r.Key); e.Seq != r.Seq {
			t.Fatalf("key record says seq %d, pending says %d", e.Seq, r.Seq)
		}
	}
	q.Release(seqsOf(l)...)
	if r := enqueueN(t, q, "after", 1); r[0].Seq != 1055 {
		t.Fatalf("next sequence %d, want 1055", r[0].Seq)
	}
	// A duplicate of a renumbered movement answers its new sequence.
	if r := enqueueN(t, q, "n", 1); !r[0].Duplicate || r[0].Seq != 1051 {
		t.Fatalf("duplicate answered %+v", r[0])
	}
	if ev := lineageEvents(t, q); ev[len(ev)-1].Detail["origin"] != OriginReplaced || ev[len(ev)-1].Detail["renumbered"] != "4" {
		t.Fatalf("journal = %+v", ev[len(ev)-1])
	}
}

// TestRestoredFileContinuesAfterCentral: a file older than central's
// record of it (a restored copy) gets a new identity naming its old one,
// renumbers only what it accepted since the start, and continues after
// central's highest; its own earlier movements keep their sequences.
func TestRestoredFileContinuesAfterCentral(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openLineage(t, path, clk)
	if _, err := q.Confirm(CentralRecord{}); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "a", 10)
	syncAll(t, q, clk.Now())
	enqueueN(t, q, "b", 2) // pending at the copy: 11, 12
	old := q.Lineage().FileID
	q.Close()

	q = openLineage(t, path, clk)
	enqueueN(t, q, "c", 3) // accepted offline after the restore: 13..15
	c, err := q.Confirm(CentralRecord{Highest: 500, FileID: old})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Behind || c.Origin != OriginRestored || c.Prev != old || c.FileID == old || c.Renumbered != 3 || c.RestoredAt.IsZero() {
		t.Fatalf("confirmation = %+v", c)
	}
	l, _ := q.Lease(clk.Now(), 10)
	got := seqsOf(l)
	want := []uint64{11, 12, 501, 502, 503}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sequences after a restore %v, want %v", got, want)
	}
}

// TestConfirmUpToDate: a file central is not ahead of keeps its
// sequences and lineage; only the fence is lifted.
func TestConfirmUpToDate(t *testing.T) {
	clk := newClock()
	q := openLineage(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	q.Confirm(CentralRecord{})
	enqueueN(t, q, "a", 3)
	syncAll(t, q, clk.Now())
	before := q.Lineage()
	c, err := q.Confirm(CentralRecord{Highest: 3, FileID: before.FileID})
	if err != nil || c.Behind || c.FileID != before.FileID {
		t.Fatalf("confirm of a confirmed file = %+v, %v", c, err)
	}
	q.Close()
	q = openLineage(t, q.Path(), clk)
	enqueueN(t, q, "b", 2)
	c, err = q.Confirm(CentralRecord{Highest: 3, FileID: before.FileID})
	if err != nil || c.Behind || c.Renumbered != 0 || c.Origin != OriginNew {
		t.Fatalf("confirm of an up-to-date file = %+v, %v", c, err)
	}
	if l, _ := q.Lease(clk.Now(), 10); fmt.Sprint(seqsOf(l)) != "[4 5]" {
		t.Fatalf("leased %v", seqsOf(l))
	}
}

// TestForeignFileIsHeld: when central's newest record is another file's
// that this file does not know, and this file is not behind it (two files
// give the store's sequences: a cloned PC), nothing is released, the
// journal says so, the next start is refused, and an adoption accepts it.
func TestForeignFileIsHeld(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openLineage(t, path, clk)
	q.Confirm(CentralRecord{})
	enqueueN(t, q, "a", 5)
	syncAll(t, q, clk.Now())
	q.Close()
	q = openLineage(t, path, clk)
	enqueueN(t, q, "b", 2)
	c, err := q.Confirm(CentralRecord{Highest: 5, FileID: "other-file"})
	if err != nil || c.Foreign != "other-file" || c.Confirmed() {
		t.Fatalf("confirm against another file: %+v, %v", c, err)
	}
	if l, _ := q.Lease(clk.Now(), 10); len(l) != 0 {
		t.Fatalf("leased %d movements of a file central does not know", len(l))
	}
	ev := lineageEvents(t, q)
	if last := ev[len(ev)-1]; last.Detail["central_file"] != "other-file" {
		t.Fatalf("journal %+v", last)
	}
	q.Close()
	if err := CheckLeftovers(path); !errors.Is(err, ErrLeftover) || !strings.Contains(err.Error(), "other-file") {
		t.Fatalf("CheckLeftovers = %v, want a refusal naming other-file", err)
	}
	q, err = Open(Options{Path: path, StoreID: testStore})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Adopt("local:test", "the clone was switched off", nil); err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := CheckLeftovers(path); err != nil {
		t.Fatalf("after adoption: %v", err)
	}
	q = openLineage(t, path, clk)
	if c, err := q.Confirm(CentralRecord{Highest: 5, FileID: "other-file"}); err != nil || !c.Confirmed() || c.Foreign != "" {
		t.Fatalf("confirm after adoption: %+v, %v", c, err)
	}
}

// TestUnverifiedForeignFileIsNotHeld: a file central's record names that
// nothing the store trusts corroborates (package lineage says so with
// Unverified) never holds the file: the held movements are released, the
// file records no foreign file, and the next start is not refused. A
// record it is behind is still continued after, naming that file.
func TestUnverifiedForeignFileIsNotHeld(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openLineage(t, path, clk)
	q.Confirm(CentralRecord{})
	enqueueN(t, q, "a", 5)
	syncAll(t, q, clk.Now())
	q.Close()
	q = openLineage(t, path, clk)
	enqueueN(t, q, "b", 2)
	other := uuid.NewString()
	c, err := q.Confirm(CentralRecord{Highest: 5, FileID: other, Unverified: true})
	if err != nil || c.Foreign != "" || !c.Confirmed() || c.Behind {
		t.Fatalf("confirm against an unverified file: %+v, %v", c, err)
	}
	if l, _ := q.Lease(clk.Now(), 10); fmt.Sprint(seqsOf(l)) != "[6 7]" {
		t.Fatalf("leased %v, want the held 6 and 7", seqsOf(l))
	}
	q.Close()
	if err := CheckLeftovers(path); err != nil {
		t.Fatalf("the next start is refused: %v", err)
	}

	q = openLineage(t, path, clk)
	enqueueN(t, q, "c", 1)
	c, err = q.Confirm(CentralRecord{Highest: 20, FileID: other, Unverified: true})
	if err != nil || !c.Behind || c.Prev != other || c.Base != 20 || c.Foreign != "" {
		t.Fatalf("confirm behind an unverified file: %+v, %v", c, err)
	}
	if l, _ := q.Lease(clk.Now(), 10); fmt.Sprint(seqsOf(l)) != "[6 7 21]" {
		t.Fatalf("leased %v, want 6, 7 and the renumbered 21", seqsOf(l))
	}
}

// TestConfirmBoundsCentralsSequence: a record above MaxSeq is refused and
// changes nothing (continuing after it could overflow the file's
// sequences); a record at MaxSeq is continued after without overflow.
func TestConfirmBoundsCentralsSequence(t *testing.T) {
	clk := newClock()
	q := openLineage(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	enqueueN(t, q, "a", 3)
	for _, h := range []uint64{MaxSeq + 1, 1<<64 - 1} {
		if _, err := q.Confirm(CentralRecord{Highest: h}); !errors.Is(err, ErrSeqRange) {
			t.Fatalf("confirm at %d: %v, want ErrSeqRange", h, err)
		}
		if l := q.Lineage(); l.Confirmed() || l.Base != 0 {
			t.Fatalf("a refused record changed the lineage: %+v", l)
		}
	}
	c, err := q.Confirm(CentralRecord{Highest: MaxSeq})
	if err != nil || !c.Behind || c.Base != MaxSeq || c.Renumbered != 3 {
		t.Fatalf("confirm at MaxSeq: %+v, %v", c, err)
	}
	if l, _ := q.Lease(clk.Now(), 10); fmt.Sprint(seqsOf(l)) != fmt.Sprint([]uint64{MaxSeq + 1, MaxSeq + 2, MaxSeq + 3}) {
		t.Fatalf("leased %v", seqsOf(l))
	}
	if err := q.Verify(); err != nil {
		t.Fatal(err)
	}
}
