package queue

import (
	"crypto/rand"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/rxedge/agent/central/ledger"
)

// mth is RFC 6962's Merkle tree hash, written out from the RFC so the
// log's root is checked against something other than its own frontier.
func mth(leaves []ledger.Hash) ledger.Hash {
	switch len(leaves) {
	case 0:
		return tlog.RecordHash(nil) // unused: an empty log is not compared
	case 1:
		return leaves[0]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	return tlog.NodeHash(mth(leaves[:k]), mth(leaves[k:]))
}

// rootOf rebuilds a log's root from the results of the enqueues that gave
// its sequences.
func rootOf(t *testing.T, q *Queue, first uint64, n int) ledger.Hash {
	t.Helper()
	leaves, err := q.LogLeaves(first, first+uint64(n)-1, n)
	if err != nil || len(leaves) != n {
		t.Fatalf("LogLeaves(%d, %d) = %d leaves, %v", first, n, len(leaves), err)
	}
	hs := make([]ledger.Hash, n)
	for i, l := range leaves {
		if l.Seq != first+uint64(i) {
			t.Fatalf("leaf %d has sequence %d, want %d", i, l.Seq, first+uint64(i))
		}
		hs[i] = l.Hash()
	}
	return mth(hs)
}

func ledgerOf(t *testing.T, q *Queue) LedgerState {
	t.Helper()
	st, err := q.Ledger()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CheckLog(); err != nil {
		t.Fatalf("CheckLog: %v", err)
	}
	return st
}

func TestLogFollowsEnqueue(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	st := ledgerOf(t, q)
	if st.First != 1 || st.Size != 0 || !ledger.ValidLogID(st.Log) {
		t.Fatalf("a new file's log = %+v, want first 1, size 0", st)
	}
	res := enqueueN(t, q, "a", 5)
	enqueueN(t, q, "a", 5) // duplicates: nothing logged
	enqueueN(t, q, "b", 7)
	st = ledgerOf(t, q)
	if st.Size != 12 || st.First != 1 {
		t.Fatalf("log after 12 movements = %+v", st)
	}
	if got, want := st.Root, rootOf(t, q, 1, 12); got != want {
		t.Fatalf("root %x, want the RFC 6962 root %x", got, want)
	}
	l, _ := q.LogLeaves(1, 1, 1)
	if l[0].Key != res[0].Key {
		t.Fatalf("leaf 0 key %x, want %x", l[0].Key, res[0].Key)
	}
	// Syncing changes nothing in the log.
	syncAll(t, q, clk.Now())
	if st2 := ledgerOf(t, q); st2.Root != st.Root || st2.Size != st.Size {
		t.Fatalf("log changed by syncing: %+v, was %+v", st2, st)
	}
}

func TestLogWaitsForConfirm(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openLineage(t, path, clk)
	enqueueN(t, q, "a", 4)
	if st := ledgerOf(t, q); st.Size != 0 || st.First != 1 {
		t.Fatalf("held movements were logged before Confirm: %+v", st)
	}
	if _, err := q.Confirm(CentralRecord{}); err != nil {
		t.Fatal(err)
	}
	st := ledgerOf(t, q)
	if st.Size != 4 || st.Root != rootOf(t, q, 1, 4) {
		t.Fatalf("log after Confirm = %+v", st)
	}
	enqueueN(t, q, "b", 2) // confirmed: logged at enqueue
	if st = ledgerOf(t, q); st.Size != 6 {
		t.Fatalf("log after enqueue on a confirmed file = %+v", st)
	}
	q.Close()

	// A new start fences again; up to date with central, the log goes on.
	q = openLineage(t, path, clk)
	enqueueN(t, q, "c", 3)
	if st2 := ledgerOf(t, q); st2.Log != st.Log || st2.Size != 6 {
		t.Fatalf("log while fenced = %+v", st2)
	}
	if _, err := q.Confirm(CentralRecord{Highest: 6, FileID: q.Lineage().FileID}); err != nil {
		t.Fatal(err)
	}
	if st2 := ledgerOf(t, q); st2.Log != st.Log || st2.Size != 9 || st2.Root != rootOf(t, q, 1, 9) {
		t.Fatalf("log after the second Confirm = %+v", st2)
	}
}

// TestRestoredFileStartsNewLog: an older copy of a file must not continue
// the log it had signed further before; its renumbered movements start a
// new log after central's record.
func TestRestoredFileStartsNewLog(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openLineage(t, path, clk)
	if _, err := q.Confirm(CentralRecord{}); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "a", 10)
	old := ledgerOf(t, q)
	fileID := q.Lineage().FileID
	q.Close()

	q = openLineage(t, path, clk)
	enqueueN(t, q, "c", 3) // 11..13, renumbered to 501..503
	if _, err := q.Confirm(CentralRecord{Highest: 500, FileID: fileID}); err != nil {
		t.Fatal(err)
	}
	st := ledgerOf(t, q)
	if st.Log == old.Log || st.First != 501 || st.Size != 3 || st.Root != rootOf(t, q, 501, 3) {
		t.Fatalf("log of a restored file = %+v (old log %s)", st, old.Log)
	}
	var found bool
	q.Events(time.Time{}, func(e Event) bool {
		found = found || e.Action == ActionLedger && e.Detail["prev_log"] == old.Log && e.Detail["first"] == "501"
		return true
	})
	if !found {
		t.Fatal("no journal event for the new log")
	}
}

func TestReplacedFileStartsNewLog(t *testing.T) {
	clk := newClock()
	q := openLineage(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	first := ledgerOf(t, q)
	enqueueN(t, q, "a", 2)
	if _, err := q.Confirm(CentralRecord{Highest: 40, FileID: "central-file"}); err != nil {
		t.Fatal(err)
	}
	st := ledgerOf(t, q)
	if st.Log == first.Log || st.First != 41 || st.Size != 2 {
		t.Fatalf("log of a replacement file = %+v", st)
	}
}

func TestAdoptStartsNewLog(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	enqueueN(t, q, "a", 3)
	old := ledgerOf(t, q)
	if err := q.Adopt("op", "adopted for the test", nil); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "b", 2)
	st := ledgerOf(t, q)
	if st.Log == old.Log || st.First != 4 || st.Size != 2 {
		t.Fatalf("log after adopt = %+v", st)
	}
}

// TestFileWithoutLogStartsOne: a file written without the log (an older
// agent, or NoLedger) starts a log at its next sequence; the earlier
// sequences stay outside any log.
func TestFileWithoutLogStartsOne(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q, err := Open(Options{Path: path, StoreID: testStore, Clock: clk.Now, NoLedger: true})
	if err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "a", 3)
	if _, err := q.Ledger(); err != ErrLedgerOff {
		t.Fatalf("Ledger with NoLedger: %v", err)
	}
	q.Close()
	q = openTest(t, path, clk)
	st := ledgerOf(t, q)
	if st.First != 4 || st.Size != 0 {
		t.Fatalf("log started on a file without one = %+v", st)
	}
	enqueueN(t, q, "b", 2)
	log1 := ledgerOf(t, q)
	q.Close()

	// Written again without the log: the log no longer continues to the
	// queue, and a new one starts.
	q, err = Open(Options{Path: path, StoreID: testStore, Clock: clk.Now, NoLedger: true})
	if err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "c", 1)
	q.Close()
	q = openTest(t, path, clk)
	if st := ledgerOf(t, q); st.Log == log1.Log || st.First != 7 || st.Size != 0 {
		t.Fatalf("log after writes without it = %+v (was %+v)", st, log1)
	}
}

func testSigner(t *testing.T) (note.Signer, note.Verifiers) {
	t.Helper()
	skey, vkey, err := ledger.GenerateKey(rand.Reader, testStore)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, note.VerifierList(v)
}

func signWith(s note.Signer) func(ledger.Checkpoint) ([]byte, error) {
	return func(c ledger.Checkpoint) ([]byte, error) { return ledger.Sign(c, s) }
}

// openMessage checks a stored checkpoint's message as a verifier would.
func openMessage(t *testing.T, c StoredCheckpoint, vs note.Verifiers, prevRoot ledger.Hash) ledger.Checkpoint {
	t.Helper()
	m, err := ledger.ParseMessage(c.Message)
	if err != nil {
		t.Fatal(err)
	}
	_, cp, err := ledger.Open([]byte(m.Note), vs)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.CheckConsistency(m.Proof, m.PrevSize, prevRoot, cp.Size, cp.Root); err != nil {
		t.Fatalf("checkpoint %d (size %d from %d): %v", c.ID, cp.Size, m.PrevSize, err)
	}
	return cp
}

func TestCheckpointsSignPublishTrim(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	s, vs := testSigner(t)
	if _, err := q.SignCheckpoint(clk.Now(), signWith(s)); err != ErrNothingToSign {
		t.Fatalf("sign an empty log: %v", err)
	}
	enqueueN(t, q, "a", 5)
	c1, err := q.SignCheckpoint(clk.Now(), signWith(s))
	if err != nil {
		t.Fatal(err)
	}
	cp1 := openMessage(t, c1, vs, ledger.Hash{})
	if cp1.Size != 5 || cp1.First != 1 || cp1.Store != testStore || cp1.Root != rootOf(t, q, 1, 5) {
		t.Fatalf("checkpoint = %+v", cp1)
	}
	if _, err := q.SignCheckpoint(clk.Now(), signWith(s)); err != ErrNothingToSign {
		t.Fatalf("sign again with no growth: %v", err)
	}
	if err := q.CheckpointPublished(c1.ID); err != nil {
		t.Fatal(err)
	}

	// Signed twice before central acknowledged: the older is superseded,
	// the newer proves consistency from the last acknowledged.
	enqueueN(t, q, "b", 6)
	c2, err := q.SignCheckpoint(clk.Now(), signWith(s))
	if err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "c", 9)
	c3, err := q.SignCheckpoint(clk.Now(), signWith(s))
	if err != nil {
		t.Fatal(err)
	}
	un, err := q.UnpublishedCheckpoints()
	if err != nil || len(un) != 1 || un[0].ID != c3.ID {
		t.Fatalf("unpublished = %+v, %v; want only checkpoint %d", un, err, c3.ID)
	}
	cp3 := openMessage(t, c3, vs, cp1.Root)
	if cp3.Size != 20 {
		t.Fatalf("checkpoint 3 size %d", cp3.Size)
	}
	if err := q.CheckpointPublished(c3.ID); err != nil {
		t.Fatal(err)
	}
	st := ledgerOf(t, q)
	if st.Published != 20 || st.Signed != 20 || st.Latest == nil || st.Latest.ID != c3.ID || !st.Latest.Published {
		t.Fatalf("state after publishing = %+v", st)
	}
	var held int
	q.db.View(func(tx *bolt.Tx) error { held = tx.Bucket(bucketLedgerLeaves).Stats().KeyN; return nil })
	if held != 0 {
		t.Fatalf("%d leaf hashes kept after every leaf was covered by an acknowledged checkpoint", held)
	}
	all, _ := q.Checkpoints()
	if len(all) != 3 || !all[1].Superseded || all[1].ID != c2.ID {
		t.Fatalf("kept checkpoints = %+v", all)
	}
	// The next checkpoint proves from the trimmed state.
	enqueueN(t, q, "d", 1)
	c4, err := q.SignCheckpoint(clk.Now(), signWith(s))
	if err != nil {
		t.Fatal(err)
	}
	openMessage(t, c4, vs, cp3.Root)
}

func TestSignCheckpointRefusesAnotherStoresKey(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	enqueueN(t, q, "a", 1)
	skey, _, _ := ledger.GenerateKey(rand.Reader, "S9999")
	s, _ := note.NewSigner(skey)
	if _, err := q.SignCheckpoint(clk.Now(), signWith(s)); err == nil {
		t.Fatal("signed a checkpoint with another store's key")
	}
	if st := ledgerOf(t, q); st.Signed != 0 || st.Latest != nil {
		t.Fatalf("a refused signature left a checkpoint: %+v", st)
	}
}

func TestLogSurvivesCompaction(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openTest(t, path, clk)
	enqueueN(t, q, "a", 50)
	s, _ := testSigner(t)
	if _, err := q.SignCheckpoint(clk.Now(), signWith(s)); err != nil {
		t.Fatal(err)
	}
	before := ledgerOf(t, q)
	q.Close()
	if _, err := Compact(path, CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	q = openTest(t, path, clk)
	after := ledgerOf(t, q)
	if fmt.Sprint(after.Log, after.Size, after.Root, after.Signed) != fmt.Sprint(before.Log, before.Size, before.Root, before.Signed) {
		t.Fatalf("log after compaction %+v, before %+v", after, before)
	}
}
