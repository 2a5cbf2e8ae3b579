package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/sync"
)

const storeDrain = "S-DRAIN"

// rawBatchesInFlight is how many atomic batches the raw publisher keeps
// in flight: as many as the agent's sender does.
const rawBatchesInFlight = 2

// benchDrain compares the agent's drain of a backlog, built in random key
// order as stores build theirs and in key order, with the raw atomic-batch
// publisher (orbit.go's jetstreamext.PublishMsgBatch) sending the same
// messages, built by central.Message with the same subjects and headers,
// in batches of the agent's size with as many in flight. Each delivery
// gets a fresh hub provisioned as production is (headoffice/provision:
// movement stream and archive, SyncAlways). The three take turns in
// rounds, the order reversed every other round; each rate is the total
// over its rounds.
//
// It then measures the bytes the data file holds per pending movement,
// and per synced key once every movement is drained (a local drain: the
// same settle, no central), before the horizon prunes any.
func benchDrain(ctx context.Context, b *bench) error {
	const scn = "2b drain"
	n, rounds := b.size.drainN, b.size.drainRounds
	l := sizeLabel(n)
	for _, o := range []backlogOrder{orderRandom, orderSorted} {
		if _, err := b.backlogFile(storeDrain, n, o); err != nil {
			return err
		}
	}
	lin, err := fileLineage(b.backlogs[fmt.Sprintf("%s-%d-%s", storeDrain, n, orderRandom)])
	if err != nil {
		return err
	}

	var raw, random, sorted syncResult
	for r := range rounds {
		doRaw := func() error {
			res, err := b.rawAtomicRun(ctx, fmt.Sprintf("drain-raw-%d", r+1), n, lin)
			if err != nil {
				return fmt.Errorf("raw atomic batches, round %d: %w", r+1, err)
			}
			raw = raw.plus(res)
			b.logf("drain: round %d/%d: raw atomic batches: %s", r+1, rounds, res)
			return nil
		}
		agent := func(o backlogOrder, acc *syncResult) func() error {
			return func() error {
				res, err := b.drainRunOf(ctx, fmt.Sprintf("drain-%s-%d", o, r+1), storeDrain, n, o)
				if err != nil {
					return fmt.Errorf("agent drain, %s order, round %d: %w", o, r+1, err)
				}
				*acc = acc.plus(res)
				b.logf("drain: round %d/%d: agent drain, %s order: %s", r+1, rounds, o, res)
				return nil
			}
		}
		steps := []func() error{doRaw, agent(orderRandom, &random), agent(orderSorted, &sorted)}
		if r%2 == 1 {
			steps = []func() error{steps[2], steps[1], steps[0]}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
	}

	base := fmt.Sprintf("raw atomic-batch publisher (jetstreamext.PublishMsgBatch, batches of %d, %d in flight) sending the agent's messages (central.Message: same subjects and headers) into a fresh hub provisioned like production (movement stream + archive, SyncAlways), %d rounds taking turns: %s msg/s",
		sync.DefaultBatchSize, rawBatchesInFlight, rounds, thousands(raw.rate))
	what := func(o backlogOrder) string {
		return fmt.Sprintf("agent drain (sync.Engine, default settings) of a %s backlog in %s key order, %s mov/s, vs raw atomic batches", l, o, thousands(map[backlogOrder]syncResult{orderRandom: random, orderSorted: sorted}[o].rate))
	}
	b.reportAtSize(scn, "drain_random_vs_raw_atomic", n, func(name string, t *target) {
		b.rep.ratio(scn, name, what(orderRandom), random.rate/raw.rate, base, t)
	}, atLeast(0.85))
	b.reportAtSize(scn, "drain_sorted_vs_raw_atomic", n, func(name string, t *target) {
		b.rep.ratio(scn, name, what(orderSorted), sorted.rate/raw.rate, base, t)
	}, nil)
	b.rep.ratio(scn, "drain_random_vs_sorted_"+l, "agent drain, random key order vs key order",
		random.rate/sorted.rate, fmt.Sprintf("key order: %s mov/s", thousands(sorted.rate)), nil)
	arch := func(r syncResult) string {
		return fmt.Sprintf(" (the archive, which copies behind the movement stream, held at least %.0f%% when the last was acknowledged)", 100*r.archived)
	}
	b.rep.value(scn, "drain_raw_atomic_rate_"+l, "raw atomic-batch publisher rate"+arch(raw), raw.rate, "msg/s", nil)
	b.rep.value(scn, "drain_random_rate_"+l, "agent drain rate, random key order"+arch(random), random.rate, "mov/s", nil)
	b.rep.value(scn, "drain_sorted_rate_"+l, "agent drain rate, key order"+arch(sorted), sorted.rate, "mov/s", nil)

	return b.fileBytes(ctx, scn)
}

// reportAtSize records a figure stated for a million movements: measured
// at n under name when n is a million, otherwise not measured under name
// (saying so) and measured without a target under name_<size>.
func (b *bench) reportAtSize(scn, name string, n int, record func(name string, t *target), t *target) {
	if n == million {
		record(name, t)
		return
	}
	b.rep.missing(scn, name, name, t, fmt.Sprintf("quick run: measured at %s, not at 1m", sizeLabel(n)))
	record(name+"_"+sizeLabel(n), nil)
}

// fileBytes measures the data file's bytes per pending movement of a
// random-order backlog, and per synced key after a local drain of it.
func (b *bench) fileBytes(ctx context.Context, scn string) error {
	n := b.size.bytesN
	src, err := b.backlogFile(storeDrain, n, orderRandom)
	if err != nil {
		return err
	}
	pendingBytes, err := fileSize(src)
	if err != nil {
		return err
	}
	dir, err := b.dir("drain-bytes")
	if err != nil {
		return err
	}
	path, err := b.backlogIn(storeDrain, n, orderRandom, dir)
	if err != nil {
		return err
	}
	res, err := drain(ctx, path, storeDrain)
	if err != nil {
		return fmt.Errorf("local drain: %w", err)
	}
	if res.n != n {
		return fmt.Errorf("drained %d movements, want %d", res.n, n)
	}
	syncedBytes, err := fileSize(path)
	if err != nil {
		return err
	}
	syncedUsed, err := usedBytes(path)
	if err != nil {
		return err
	}
	perPending := float64(pendingBytes) / float64(n)
	perSynced := float64(syncedUsed) / float64(n)
	b.logf("drain: data file with %d pending: %.1f MiB (%.0f B each); drained: %.1f MiB, of it in use %.1f MiB (%.0f B a key)", n, mib(pendingBytes), perPending, mib(syncedBytes), mib(syncedUsed), perSynced)
	b.reportAtSize(scn, "bytes_per_pending_vs_payload", n, func(name string, t *target) {
		b.rep.value(scn, name, fmt.Sprintf("data file bytes (%.1f MiB) / pending movements (%s, enqueued in random key order as `agent enqueue` does) / canonical payload (%d B): %.0f B per pending movement",
			mib(pendingBytes), thousands(float64(n)), payloadSize, perPending), perPending/payloadSize, "", t)
	}, atMost(2.5))
	b.reportAtSize(scn, "bytes_per_synced_key", n, func(name string, t *target) {
		b.rep.value(scn, name, fmt.Sprintf("data file bytes in use (%.1f MiB: the file, %.1f MiB, less its free pages, which compaction returns) / synced keys after draining all %s (Lease %d + MarkSynced per batch, then the notary's checkpoint, acknowledged), before the horizon prunes any",
			mib(syncedUsed), mib(syncedBytes), thousands(float64(n)), drainLease), perSynced, "B", t)
	}, atMost(96))
	return nil
}

// usedBytes is the size of the bbolt file at path less its free pages
// (and those pending release). Nothing may hold the file open.
func usedBytes(path string) (int64, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var size int64
	if err := db.View(func(tx *bolt.Tx) error {
		size = tx.Size()
		return nil
	}); err != nil {
		return 0, err
	}
	st := db.Stats()
	free := int64(st.FreePageN+st.PendingPageN) * int64(db.Info().PageSize)
	return size - free, db.Close()
}

// fileLineage is the lineage of the data file at path, which the agent's
// messages carry in their headers.
func fileLineage(path string) (central.FileLineage, error) {
	q, err := queue.Open(queue.Options{Path: path, ReadOnly: true})
	if err != nil {
		return central.FileLineage{}, err
	}
	defer q.Close()
	l := q.Lineage()
	f := central.FileLineage{ID: l.FileID}
	if l.Origin == queue.OriginReplaced || l.Origin == queue.OriginRestored {
		f.Prev, f.Base, f.Origin = l.Prev, l.Base, l.Origin
	}
	return f, nil
}

// drainRunOf delivers a backlog of n of store in order with the agent's
// default settings to a fresh hub, and checks that both streams hold n.
func (b *bench) drainRunOf(ctx context.Context, name, store string, n int, order backlogOrder) (syncResult, error) {
	r, err := b.newEngineRigOf(name, store, n, order, false)
	if err != nil {
		return syncResult{}, err
	}
	defer r.close()
	res, err := r.deliver(ctx, n)
	if err != nil {
		return res, err
	}
	res.archived, err = checkLayout(ctx, r.h.URL(), n)
	return res, err
}

// rawAtomicRun publishes the n movements of storeDrain's backlog as the
// agent would (central.Message with the file's lineage), built as they
// go, in atomic batches with rawBatchesInFlight in flight, to a fresh hub,
// and times it until the last batch is acknowledged.
func (b *bench) rawAtomicRun(ctx context.Context, name string, n int, lin central.FileLineage) (syncResult, error) {
	dir, err := b.dir("sync-" + name)
	if err != nil {
		return syncResult{}, err
	}
	defer os.RemoveAll(dir) // after the hub's shutdown: see engineRig.close
	h, err := startHub(filepath.Join(dir, "hub"), false)
	if err != nil {
		return syncResult{}, err
	}
	defer h.Shutdown()
	nc, err := nats.Connect(h.URL())
	if err != nil {
		return syncResult{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Minute))
	if err != nil {
		return syncResult{}, err
	}
	enqueuedAt := b.now
	size := sync.DefaultBatchSize
	next := make(chan int)
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range rawBatchesInFlight {
		g.Go(func() error {
			msgs := make([]*nats.Msg, 0, size)
			for from := range next {
				msgs = msgs[:0]
				for i := from; i < min(from+size, n); i++ {
					p := generate(storeDrain, i, b.now)
					msgs = append(msgs, rawMessage(storeDrain, lin, uint64(i+1), enqueuedAt, &p))
				}
				ack, err := jetstreamext.PublishMsgBatch(gctx, js, msgs)
				if err != nil {
					return fmt.Errorf("batch at %d: %w", from, err)
				}
				if ack.BatchSize != uint64(len(msgs)) {
					return fmt.Errorf("batch at %d: acknowledged %d messages, sent %d", from, ack.BatchSize, len(msgs))
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(next)
		for from := 0; from < n; from += size {
			select {
			case next <- from:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return syncResult{}, err
	}
	el := time.Since(start)
	res := syncResult{n: n, elapsed: el, rate: rate(n, el)}
	res.archived, err = checkLayout(ctx, h.URL(), n)
	return res, err
}

// checkLayout checks that the movement stream of the hub at url holds n
// messages and returns the share of them its archive had copied by then.
// The archive copies behind the movement stream (it sources it), so it
// is not awaited: each turn has a hub of its own, shut down after it.
func checkLayout(ctx context.Context, url string, n int) (float64, error) {
	if err := checkStored(ctx, url, n); err != nil {
		return 0, err
	}
	nc, js, err := connectJS(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, central.ArchiveConfig(central.StreamOptions{}).Name)
	if err != nil {
		return 0, fmt.Errorf("the archive: %w", err)
	}
	return float64(s.CachedInfo().State.Msgs) / float64(n), nil
}
