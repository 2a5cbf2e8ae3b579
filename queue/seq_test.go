package queue

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
)

// TestLookupSeqs puts movements in every state, prunes a synced one, and
// checks what LookupSeqs says of each sequence, of a pruned one and of
// sequences never assigned.
func TestLookupSeqs(t *testing.T) {
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	var items []movement.Prepared
	for i := range 6 {
		items = append(items, mv(t, fmt.Sprintf("M%d", i), 0, ""))
	}
	res, err := q.Enqueue(items)
	if err != nil {
		t.Fatal(err)
	}
	if last, err := q.LastSeq(); err != nil || last != 6 {
		t.Fatalf("LastSeq = %d, %v; want 6", last, err)
	}
	if _, err := q.Lease(clk.Now(), 10); err != nil {
		t.Fatal(err)
	}
	// 1 synced long ago (pruned), 2 synced, 3 quarantined, 4 purged, 5 and 6 pending.
	if err := q.MarkSynced([]Ack{{Seq: 1, StreamSeq: 101}}); err != nil {
		t.Fatal(err)
	}
	clk.Add(48 * time.Hour)
	if err := q.MarkSynced([]Ack{{Seq: 2, StreamSeq: 102}}); err != nil {
		t.Fatal(err)
	}
	if err := q.Quarantine([]QuarantineAt{{Seq: 3, Reason: "permanent:too_large"}, {Seq: 4, Reason: "exhausted:timeout"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Purge(Purge{Keys: [][16]byte{res[3].Key}, Actor: "local:test", Reason: "exported, not wanted"}); err != nil {
		t.Fatal(err)
	}
	q.Release(5, 6)
	if n, err := q.Prune(24*time.Hour, 0, 100); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	lk, err := q.LookupSeqs([]uint64{9, 6, 0, 1, 2, 3, 4, 5, 2})
	if err != nil {
		t.Fatal(err)
	}
	if lk.Last != 6 {
		t.Errorf("Last = %d, want 6", lk.Last)
	}
	want := []struct {
		seq    uint64
		state  State
		key    [16]byte
		reason string
		stream uint64
	}{
		{0, 0, [16]byte{}, "", 0},
		{1, 0, [16]byte{}, "", 0},
		{2, Synced, res[1].Key, "", 102},
		{3, Quarantined, res[2].Key, "permanent:too_large", 0},
		{4, Purged, res[3].Key, "", 0},
		{5, Pending, res[4].Key, "", 0},
		{6, Pending, res[5].Key, "", 0},
		{9, 0, [16]byte{}, "", 0},
	}
	if len(lk.States) != len(want) {
		t.Fatalf("%d states, want %d: %+v", len(lk.States), len(want), lk.States)
	}
	for i, w := range want {
		g := lk.States[i]
		if g.Seq != w.seq || g.State != w.state || g.Key != w.key || g.Reason != w.reason || g.StreamSeq != w.stream {
			t.Errorf("seq %d: got %+v, want state %v key %x reason %q stream %d", w.seq, g, w.state, w.key, w.reason, w.stream)
		}
	}
	// Only pending sequences asked: no scan.
	if lk, err := q.LookupSeqs([]uint64{5, 6}); err != nil || lk.Scanned != 0 {
		t.Errorf("LookupSeqs(pending) scanned %d, %v; want 0", lk.Scanned, err)
	}
}

// TestLookupSeqsScanCost measures the answer for synced sequences:
// RXEDGE_LOOKUP_KEYS keys held (default 20,000; 200,000 is a month of a
// busy store), 10,000 sequences asked, synced or never assigned. Synced
// sequences are read from the synced bucket, by sequence: no pass over
// the keys bucket is made.
func TestLookupSeqsScanCost(t *testing.T) {
	n := 20_000
	if v := os.Getenv("RXEDGE_LOOKUP_KEYS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	} else if testing.Short() {
		n = 2_000
	}
	clk := newClock()
	q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	for lo := 0; lo < n; lo += 1000 {
		var items []movement.Prepared
		for i := lo; i < min(lo+1000, n); i++ {
			items = append(items, mv(t, fmt.Sprintf("M%07d", i), 0, ""))
		}
		if _, err := q.Enqueue(items); err != nil {
			t.Fatal(err)
		}
		leased, err := q.Lease(clk.Now(), 1000)
		if err != nil {
			t.Fatal(err)
		}
		var acks []Ack
		for _, r := range leased {
			acks = append(acks, Ack{Seq: r.Seq, StreamSeq: r.Seq})
		}
		if err := q.MarkSynced(acks); err != nil {
			t.Fatal(err)
		}
	}
	var ask []uint64
	for s := uint64(n) - 5000; len(ask) < 10_000; s++ {
		ask = append(ask, s)
	}
	start := time.Now()
	lk, err := q.LookupSeqs(ask)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, s := range lk.States {
		if s.State == Synced {
			found++
		}
	}
	if found != 5001 || lk.Scanned != 0 {
		t.Errorf("found %d synced after scanning %d keys; want 5001, scanning none", found, lk.Scanned)
	}
	t.Logf("LookupSeqs: 10,000 sequences against %d keys held: %v, %d keys read", n, took, lk.Scanned)
}
