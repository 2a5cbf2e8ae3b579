package queue

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rxedge/agent/movement"
)

// noFreelist is what a bbolt meta page names as its freelist page when
// the list was not written (bbolt's PgidNoFreelist).
const noFreelist = ^uint64(0)

// metaFreelist reads the freelist page named by the newer of the two meta
// pages of the bbolt file at path. A meta page is a 16-byte page header,
// then magic, version, page size and flags (4 bytes each), the root
// bucket (16), the freelist page (8), the high water mark (8) and the
// transaction id (8), in the machine's byte order (little-endian here).
func metaFreelist(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := int(binary.LittleEndian.Uint32(b[16+8:]))
	var freelist, txid uint64
	for i := range 2 {
		m := b[i*pageSize+16:]
		if tx := binary.LittleEndian.Uint64(m[48:]); i == 0 || tx > txid {
			freelist, txid = binary.LittleEndian.Uint64(m[32:]), tx
		}
	}
	return freelist
}

// TestFreelistWrittenAtClose: while the queue runs its commits do not
// write the list of free pages; a clean close writes it, and a file left
// by a crash (a copy taken while the queue runs) opens with the same free
// pages found by walking it, and with everything it held.
func TestFreelistWrittenAtClose(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.db")
	q := openTest(t, path, clk)
	const n = 3000
	for from := 0; from < n; from += 500 {
		items := make([]movement.Prepared, 0, 500)
		for i := from; i < from+500; i++ {
			items = append(items, mv(t, fmt.Sprintf("F%05d", i), 0, "CII"))
		}
		if _, err := q.Enqueue(items); err != nil {
			t.Fatal(err)
		}
	}
	leased, err := q.Lease(clk.Now(), n/2)
	if err != nil || len(leased) != n/2 {
		t.Fatalf("Lease: %d, %v", len(leased), err)
	}
	acks := make([]Ack, len(leased))
	for i, r := range leased {
		acks[i] = Ack{Seq: r.Seq, StreamSeq: uint64(i + 1)}
	}
	if err := q.MarkSynced(acks); err != nil {
		t.Fatal(err)
	}
	st := q.DB().Stats()
	free := st.FreePageN + st.PendingPageN
	if free < 20 {
		t.Fatalf("%d free pages after settling %d movements: the test needs a freelist worth writing", free, n/2)
	}
	if got := metaFreelist(t, path); got != noFreelist {
		t.Fatalf("a running queue's commit wrote the freelist (page %d)", got)
	}

	crash := filepath.Join(dir, "crash.db")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crash, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if got := metaFreelist(t, path); got == noFreelist {
		t.Fatal("Close did not write the freelist")
	}

	// The crash image: its free pages are found again, and it holds what
	// the queue held.
	c, err := Open(Options{Path: crash, StoreID: testStore, Clock: clk.Now})
	if err != nil {
		t.Fatalf("open the crash image: %v", err)
	}
	if got := c.DB().Stats().FreePageN; got != free {
		t.Errorf("crash image: %d free pages found, the queue had %d", got, free)
	}
	verify(t, c)
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if p, y := s.Count(Pending), s.Count(Synced); p != n/2 || y != n/2 {
		t.Errorf("crash image holds %d pending and %d synced, want %d each", p, y, n/2)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := metaFreelist(t, crash); got == noFreelist {
		t.Fatal("Close of the reopened crash image did not write the freelist")
	}

	// The start-up check reads a file whose list was not written.
	if err := os.WriteFile(crash, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	_, sp, err := CompactionNeeded(crash)
	if err != nil {
		t.Fatalf("CompactionNeeded on the crash image: %v", err)
	}
	if want := int64(free) * int64(os.Getpagesize()); sp.Free < want {
		t.Errorf("CompactionNeeded on the crash image: %d bytes free, want at least %d", sp.Free, want)
	}
}
