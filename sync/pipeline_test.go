package sync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/faultproxy"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestDrainPipelining measures what preparing the next atomic batch while
// one is in the air gains: a backlog of RXEDGE_SYNC_DRAIN movements
// (e.g. 30000; the test is skipped without it) drained by the sender
// with batches prepared ahead (the product) and with each batch leased
// and built only after the one before it was acknowledged (serial),
// taking turns (ABBA) against one real server on disk with SyncAlways,
// RXEDGE_SYNC_DRAIN_ROUNDS rounds (default 3). The rate is taken between
// 10% and 90% of the backlog synced, so connecting and the last settle
// are not in it; it logs each run and the ratio of the medians. It
// asserts only that every backlog drained: speed is a measurement.
func TestDrainPipelining(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("RXEDGE_SYNC_DRAIN"))
	if n <= 0 {
		t.Skip("set RXEDGE_SYNC_DRAIN=<movements> to measure the drain")
	}
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("RXEDGE_SYNC_DRAIN_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	srv := natstest.StartHub(t)
	rates := map[bool][]float64{}
	for round := range rounds {
		order := []bool{false, true}
		if round%2 == 1 {
			order = []bool{true, false}
		}
		for _, serial := range order {
			rate := drainOnce(t, srv.URL(), fmt.Sprintf("D%d%v", round, serial), n, serial)
			rates[serial] = append(rates[serial], rate)
			t.Logf("round %d, serial %v: %.0f movements/s", round+1, serial, rate)
		}
	}
	med := func(xs []float64) float64 {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	pre, ser := med(rates[false]), med(rates[true])
	t.Logf("drain of %d movements, median of %d: prepared ahead %.0f/s, serial %.0f/s, ratio %.3f", n, rounds, pre, ser, pre/ser)
}

// drainOnce enqueues n movements for store, runs an engine until they are
// synced and returns the movements synced per second between 10% and 90%.
func drainOnce(t *testing.T, url, store string, n int, serial bool) float64 {
	t.Helper()
	o := testOptions(t, url)
	o.StoreID = store
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: store})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	r := &rig{t: t, q: q, opts: o}
	r.enqueue(0, n)
	e := New(q, o, nil, nil, nil)
	r.e = e
	e.s.serial = serial
	e.s.o.Probe = retry.Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	// Polled: the count is the event, and it moves on a real server.
	lo, hi := uint64(n/10), uint64(n-n/10)
	var tLo time.Time
	deadline := time.Now().Add(5 * time.Minute)
	for {
		s, err := q.Stats()
		if err != nil {
			t.Fatal(err)
		}
		synced := s.Count(queue.Synced)
		now := time.Now()
		if tLo.IsZero() && synced >= lo {
			tLo = now
		}
		if synced >= hi {
			r.waitSynced(n, time.Minute)
			return float64(hi-lo) / now.Sub(tLo).Seconds()
		}
		if now.After(deadline) {
			t.Fatalf("%s: %d of %d synced after 5 minutes", store, synced, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestPreparedBatchGivenBackOffline: while a backlog drains, the sender
// holds the next batch leased and built. When central becomes unreachable
// that batch is given back with the ones in the air, so nothing stays
// leased while the agent is offline (a restarted sender, a redrive or
// a probe may then take those movements), and after the outage the
// backlog drains exactly once with no attempt charged.
func TestPreparedBatchGivenBackOffline(t *testing.T) {
	srv := natstest.StartHub(t)
	px, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	const batch, n = 100, 6000
	r := startRig(t, testOptions(t, px.URL()), func(o *Options) { o.BatchSize = batch })
	r.stop()
	r.enqueue(0, n)
	r.start()
	r.waitFor("a drain under way", 30*time.Second, func(s queue.Stats) bool { return s.Count(queue.Synced) >= 5*batch })
	// The network goes dead: the batch in the air waits for an
	// acknowledgement that never comes, the next one is prepared, and the
	// connection is found dead (pings) before that batch times out.
	px.Blackhole()
	// Polled: the leases are given back by the loop and the settler.
	deadline := time.Now().Add(30 * time.Second)
	for r.q.Leased() != 0 || r.e.Connection().State == status.Online {
		if time.Now().After(deadline) {
			t.Fatalf("offline for 30s: %d movements still leased, connection %+v", r.q.Leased(), r.e.Connection())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := r.stats(); s.Count(queue.Synced) == n {
		t.Fatalf("the backlog drained before the outage; nothing was tested")
	}
	px.Pass()
	r.waitSynced(n, 60*time.Second)
	exactlyOnce(t, srv.URL(), n)
	noAttemptsCharged(t, r.q)
}

// BenchmarkPrepareBatch is the work preparing takes off the drain's
// critical path: leasing a batch of 1,000 from a backlog of 20,000 and
// building its messages (given back after each round).
func BenchmarkPrepareBatch(b *testing.B) {
	srv := natstest.StartHub(b)
	nc := natstest.Connect(b, srv.URL())
	tr, err := newJSTransport(nc, 256, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	q, err := queue.Open(queue.Options{Path: filepath.Join(b.TempDir(), "agent.db"), StoreID: testStore})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	for i := 0; i < 20_000; i += 500 {
		var items []movement.Prepared
		for j := i; j < i+500; j++ {
			p, es := movement.Prepare([]byte(movementJSON(fmt.Sprintf("M%06d", j), "")), testStore, time.Now())
			if es != nil {
				b.Fatal(es)
			}
			items = append(items, p)
		}
		if _, err := q.Enqueue(items); err != nil {
			b.Fatal(err)
		}
	}
	s := newSender(q, tr, Options{StoreID: testStore}, nil, nil)
	b.ResetTimer()
	for b.Loop() {
		items, err := q.Lease(time.Now(), MaxBatchSize)
		if err != nil || len(items) != MaxBatchSize {
			b.Fatalf("lease: %d, %v", len(items), err)
		}
		s.next = s.prepare(items)
		s.dropNext()
	}
}
