package queue

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

// payloadOf prepares movement id with a note that pads its canonical
// encoding to size bytes.
func payloadOf(t testing.TB, id string, size int) movement.Prepared {
	t.Helper()
	js := func(note string) string {
		return fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z","note":%q}`, id, note)
	}
	p, es := movement.Prepare([]byte(js("x")), testStore, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if es != nil {
		t.Fatalf("prepare %s: %v", id, es)
	}
	if pad := size - len(p.Payload) + 1; pad > 1 {
		p, es = movement.Prepare([]byte(js(strings.Repeat("x", pad))), testStore, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		if es != nil {
			t.Fatalf("prepare %s: %v", id, es)
		}
	}
	return p
}

// fillRandom enqueues n movements of a size-byte payload, with random
// movement ids (so random keys, as live intake gives them), in
// submissions of 1,000.
func fillRandom(t testing.TB, q *Queue, n, size int, rnd *rand.Rand) {
	t.Helper()
	items := make([]movement.Prepared, 0, 1000)
	for i := 0; i < n; i++ {
		items = append(items, payloadOf(t, fmt.Sprintf("R%016x", rnd.Uint64()), size))
		if len(items) == cap(items) || i == n-1 {
			if _, err := q.Enqueue(items); err != nil {
				t.Fatal(err)
			}
			items = items[:0]
		}
	}
}

// drainAll leases and acknowledges every pending movement, 1,000 per
// settlement.
func drainAll(t testing.TB, q *Queue, now time.Time, stream *uint64) {
	t.Helper()
	for {
		l, err := q.Lease(now, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 0 {
			return
		}
		acks := make([]Ack, len(l))
		for i, r := range l {
			*stream++
			acks[i] = Ack{Seq: r.Seq, StreamSeq: *stream}
		}
		if err := q.MarkSynced(acks); err != nil {
			t.Fatal(err)
		}
	}
}

// pageBytes is the bytes of pages the buckets of the file use, per
// bucket, and a line describing each.
func pageBytes(t testing.TB, q *Queue) (map[string]int64, string) {
	t.Helper()
	out := map[string]int64{}
	var b strings.Builder
	q.DB().View(func(tx *bolt.Tx) error {
		ps := int64(q.DB().Info().PageSize)
		return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
			s := bk.Stats()
			used := int64(s.BranchPageN+s.LeafPageN+s.BranchOverflowN+s.LeafOverflowN) * ps
			if s.InlineBucketN > 0 && used == 0 {
				used = int64(s.InlineBucketInuse)
			}
			out[string(name)] = used
			fill := 0.0
			if s.LeafAlloc > 0 {
				fill = float64(s.LeafInuse) / float64(s.LeafAlloc)
			}
			fmt.Fprintf(&b, "  %-11s keys %8d  leaf pages %7d (%.0f%% full)  branch pages %5d  bytes %10d\n", name, s.KeyN, s.LeafPageN+s.LeafOverflowN, 100*fill, s.BranchPageN, used)
			return nil
		})
	})
	return out, b.String()
}

// TestBytesPerMovement measures the data file: bytes per pending movement
// of a 256-byte payload, with random keys, and bytes per synced key kept
// once they are all acknowledged. It is a measurement, not a check: set
// RXEDGE_QUEUE_SIZE=N (e.g. 100000 or 1000000) to run it.
func TestBytesPerMovement(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("RXEDGE_QUEUE_SIZE"))
	if n <= 0 {
		t.Skip("a measurement: set RXEDGE_QUEUE_SIZE=N to fill a file with N movements")
	}
	const size = 256
	path := filepath.Join(t.TempDir(), "agent.db")
	clk := newClock()
	q := openTest(t, path, clk)
	rnd := rand.New(rand.NewPCG(uint64(n), 1))
	start := time.Now()
	fillRandom(t, q, n, size, rnd)
	t.Logf("filled %d movements in %v", n, time.Since(start).Round(time.Millisecond))
	fi, _ := os.Stat(path)
	pages, desc := pageBytes(t, q)
	var inUse int64
	for _, v := range pages {
		inUse += v
	}
	t.Logf("pending: file %d B = %.0f B per movement (%.2f× the %d-B payload); pages in use %.0f B per movement (%.2f×)\n%s",
		fi.Size(), float64(fi.Size())/float64(n), float64(fi.Size())/float64(n)/size, size,
		float64(inUse)/float64(n), float64(inUse)/float64(n)/size, desc)
	var stream uint64
	start = time.Now()
	drainAll(t, q, clk.Now().Add(time.Hour), &stream)
	t.Logf("drained in %v", time.Since(start).Round(time.Millisecond))
	fi, _ = os.Stat(path)
	pages, desc = pageBytes(t, q)
	kept := pages[string(bucketKeys)] + pages[string(bucketSynced)]
	t.Logf("synced: file %d B; pages of the key index and synced blocks %.0f B per synced key (and %.0f B of the log's leaf hashes, which the notary's next acknowledged checkpoint drops)\n%s",
		fi.Size(), float64(kept)/float64(n), float64(pages[string(bucketLedgerLeaves)])/float64(n), desc)
}

// BenchmarkSettleRandom measures the settle of a drain whose backlog is
// in random key order: each iteration leases 1,000 movements and
// acknowledges them in one settlement. The backlog is refilled outside
// the timer when it runs out.
func BenchmarkSettleRandom(b *testing.B) {
	const backlog = 100000
	path := filepath.Join(b.TempDir(), "agent.db")
	clk := newClock()
	q := openTest(b, path, clk)
	rnd := rand.New(rand.NewPCG(7, 7))
	fillRandom(b, q, backlog, 256, rnd)
	var stream uint64
	now := clk.Now().Add(time.Hour)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := q.Lease(now, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if len(l) == 0 {
			b.StopTimer()
			fillRandom(b, q, backlog, 256, rnd)
			b.StartTimer()
			continue
		}
		acks := make([]Ack, len(l))
		for j, r := range l {
			stream++
			acks[j] = Ack{Seq: r.Seq, StreamSeq: stream}
		}
		if err := q.MarkSynced(acks); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "movements/s")
}
