package migrate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/hub"
)

// TestRetriesBackOffTogether: movements a leader change failed together
// (here, all at once, as the settler finds them) are tried again after one
// backoff shared by all of them, not one backoff each in turn; a run with
// thousands in flight waited minutes that way. The waits the settler asks
// for are recorded, not timed.
func TestRetriesBackOffTogether(t *testing.T) {
	const parts, n = 2, 200
	// The embedded server itself: the test kit's hub links this package.
	h, err := hub.Start(hub.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()
	nc, err := nats.Connect(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for p := range parts {
		if _, err := js.CreateStream(ctx, central.StreamConfig(central.StreamOptions{Partitions: parts, Partition: p})); err != nil {
			t.Fatal(err)
		}
	}
	o := Options{Partitions: parts}.withDefaults()
	mjs, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(o.Timeout))
	if err != nil {
		t.Fatal(err)
	}
	sum := &Summary{PerPartition: make([]uint64, parts)}
	var mu sync.Mutex
	var waited time.Duration
	var waits int
	m := &migration{nc: nc, js: mjs, o: o, sum: sum, verify: make(chan struct{}, o.Verifiers),
		wait: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			waited += d
			waits++
			mu.Unlock()
			return wait(ctx, d)
		}}
	// Every movement's first publish failed at once, before it was sent
	// (as a stalled publish does).
	in := make(chan *item, n)
	failed := errors.New("stalled")
	for i := range n {
		store := fmt.Sprintf("S%04d", i%20)
		key := fmt.Sprintf("%032x", i)
		p := central.Partition(store, parts)
		msg := nats.NewMsg(central.PartitionSubject(p, parts, store, key))
		msg.Header.Set(central.HeaderMsgID, key)
		msg.Header.Set(central.HeaderExpectLast, "0")
		msg.Data = []byte("{}")
		in <- &item{oldSeq: uint64(i + 1), store: store, key: key, part: p, msg: msg, err: failed, tries: 1, sent: time.Now()}
	}
	close(in)
	if err := m.settle(ctx, in); err != nil {
		t.Fatal(err)
	}
	m.wg.Wait()
	if sum.Migrated != n || len(sum.Failures) != 0 {
		t.Fatalf("migrated %d of %d, failures %v", sum.Migrated, n, sum.Failures)
	}
	// One backoff in all (the first movement's; the others' windows have
	// passed meanwhile), where waiting in turn asks for n of them.
	if waited > backoff(1) {
		t.Errorf("the settler waited %s in %d waits for %d movements that failed together, want at most one backoff (%s)", waited, waits, n, backoff(1))
	}
}
