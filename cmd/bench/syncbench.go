package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/sync"
)

const storeSync = "S-SYNC"

// rawWindow is the PublishAsync window of the raw baseline, the agent's
// default sync.max_in_flight.
const rawWindow = 256

// benchSync compares the agent's delivery of a backlog with the raw way to
// publish the same messages: PublishAsync one at a time with a window of
// 256, to a SyncAlways stream. Every delivery has its own hub, so no
// message is refused as a duplicate of another delivery's.
//
// The machines this runs on are noisy, and a slow minute of the disk would
// tilt a ratio whose two sides ran minutes apart. So the raw baseline and
// the agent's trickle take turns in rounds, each round a slice of the
// backlog (the trickle engine is stopped between rounds and started again
// over the same file and hub), and the agent's drain, which takes seconds,
// runs three times spread over the rounds; its median counts.
func benchSync(ctx context.Context, b *bench) error {
	const scn = "2 sync"
	n, rounds := b.size.syncN, b.size.syncRounds
	items := generateN(storeSync, 0, n, b.now)

	raw, err := b.newRawRig("raw", false)
	if err != nil {
		return err
	}
	defer raw.close()
	trickle, err := b.newEngineRig("trickle", n, false)
	if err != nil {
		return err
	}
	defer trickle.close()
	// Above the backlog: the sender never sees a backlog due, and sends
	// single publishes only.
	trickle.o.BatchThreshold = n + 1
	lin, err := fileLineage(trickle.path)
	if err != nil {
		return err
	}
	raw.lin = lin

	drainAt := map[int]bool{0: true, rounds / 2: true, rounds - 1: true}
	var rawRes, trickleRes syncResult
	var drains []syncResult
	for r := range rounds {
		lo, hi := r*n/rounds, (r+1)*n/rounds
		doRaw := func() error {
			res, err := raw.publish(ctx, items[lo:hi], uint64(lo+1), b.now)
			if err != nil {
				return fmt.Errorf("raw baseline, round %d: %w", r+1, err)
			}
			rawRes = rawRes.plus(res)
			b.logf("sync: round %d/%d: raw PublishAsync, SyncAlways: %s", r+1, rounds, res)
			return nil
		}
		doTrickle := func() error {
			res, err := trickle.deliver(ctx, hi)
			if err != nil {
				return fmt.Errorf("trickle, round %d: %w", r+1, err)
			}
			trickleRes = trickleRes.plus(res)
			b.logf("sync: round %d/%d: agent trickle, SyncAlways: %s", r+1, rounds, res)
			return nil
		}
		steps := []func() error{doRaw, doTrickle}
		if r%2 == 1 {
			steps = []func() error{doTrickle, doRaw}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		if drainAt[r] && len(drains) < 3 {
			d, err := b.drainRun(ctx, fmt.Sprintf("drain-%d", len(drains)+1), n, false)
			if err != nil {
				return fmt.Errorf("backlog drain: %w", err)
			}
			b.logf("sync: agent drain %d, SyncAlways: %s", len(drains)+1, d)
			drains = append(drains, d)
		}
	}
	for len(drains) < 3 {
		d, err := b.drainRun(ctx, fmt.Sprintf("drain-%d", len(drains)+1), n, false)
		if err != nil {
			return fmt.Errorf("backlog drain: %w", err)
		}
		drains = append(drains, d)
	}
	if err := raw.checkStored(ctx, n); err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	if err := trickle.checkStored(ctx, n); err != nil {
		return fmt.Errorf("trickle: %w", err)
	}
	drain := median(drains)

	var noSyncDrains []syncResult
	for i := range 3 {
		d, err := b.drainRun(ctx, fmt.Sprintf("drain-nosync-%d", i+1), n, true)
		if err != nil {
			return fmt.Errorf("backlog drain without SyncAlways: %w", err)
		}
		b.logf("sync: agent drain %d, no SyncAlways: %s", i+1, d)
		noSyncDrains = append(noSyncDrains, d)
	}
	drainNoSync := median(noSyncDrains)
	rawNoSync, err := b.newRawRig("raw-nosync", true)
	if err != nil {
		return err
	}
	defer rawNoSync.close()
	rawNoSync.lin = lin
	rawNS, err := rawNoSync.publish(ctx, items, 1, b.now)
	if err != nil {
		return fmt.Errorf("raw baseline without SyncAlways: %w", err)
	}
	b.logf("sync: raw PublishAsync, no SyncAlways: %s", rawNS)
	settle, err := b.localDrainRun(ctx, n)
	if err != nil {
		return fmt.Errorf("local drain: %w", err)
	}
	b.logf("sync: local drain, no central: %s", settle)

	// The trickle setting makes the sender's "is a backlog due?" check
	// count the whole due index on every fill instead of stopping at the
	// threshold of 64: a cost of this setting, not of the product's
	// trickle. Measured so that it can be weighed.
	dueScan, err := b.dueCountCost(n)
	if err != nil {
		return err
	}

	base := fmt.Sprintf("raw PublishAsync one at a time, window %d, same subjects and headers, SyncAlways hub, in %d rounds taking turns with the trickle: %s msg/s",
		rawWindow, rounds, thousands(rawRes.rate))
	backlog := thousands(float64(n))
	b.rep.ratio(scn, "trickle_vs_raw_durable", fmt.Sprintf("agent single-publish path (sync.Engine, batch threshold above the backlog) over a %s backlog vs raw", backlog),
		trickleRes.rate/rawRes.rate, base, atLeast(0.8))
	b.rep.ratio(scn, "backlog_drain_vs_raw_durable", fmt.Sprintf("agent backlog drain (sync.Engine, atomic batches) of %s, median of 3 spread over the rounds (%s mov/s) vs raw", backlog, rates(drains)),
		drain.rate/rawRes.rate, base, atLeast(8))
	b.rep.value(scn, "sync_raw_rate", "raw PublishAsync rate, SyncAlways", rawRes.rate, "msg/s", nil)
	b.rep.value(scn, "sync_trickle_rate", "agent trickle rate, SyncAlways", trickleRes.rate, "mov/s", nil)
	b.rep.value(scn, "sync_drain_rate", "agent drain rate, SyncAlways (median of 3)", drain.rate, "mov/s", nil)
	b.rep.value(scn, "sync_drain_nosync_rate", fmt.Sprintf("agent drain rate, hub without SyncAlways (NoSync), median of 3 (%s)", rates(noSyncDrains)), drainNoSync.rate, "mov/s", nil)
	b.rep.ratio(scn, "backlog_drain_nosync_vs_durable", "agent drain, hub without SyncAlways vs with it",
		drainNoSync.rate/drain.rate, fmt.Sprintf("agent drain, SyncAlways: %s mov/s", thousands(drain.rate)), nil)
	b.rep.value(scn, "sync_raw_nosync_rate", "raw PublishAsync rate, hub without SyncAlways", rawNS.rate, "msg/s", nil)
	b.rep.value(scn, "sync_local_drain_rate", fmt.Sprintf("the drain's local side alone: Lease %d + MarkSynced (one commit) per batch, no central", drainLease), settle.rate, "mov/s", nil)
	b.rep.value(scn, "trickle_duecount_ms", fmt.Sprintf("cost the trickle setting adds to each fill of the window: DueCount over the whole %s backlog (the product stops at 64)", backlog), ms(dueScan), "ms", nil)
	return nil
}

// syncResult is one delivery, or the sum of several.
type syncResult struct {
	n       int
	elapsed time.Duration
	rate    float64
	// archived is the share of the delivery the archive held when its
	// last movement was acknowledged (drain scenario only; the minimum
	// over a sum).
	archived float64
}

func (r syncResult) plus(o syncResult) syncResult {
	s := syncResult{n: r.n + o.n, elapsed: r.elapsed + o.elapsed, archived: o.archived}
	if r.n > 0 {
		s.archived = min(r.archived, o.archived)
	}
	s.rate = rate(s.n, s.elapsed)
	return s
}

func (r syncResult) String() string {
	s := fmt.Sprintf("%d in %s: %s/s", r.n, r.elapsed.Round(time.Millisecond), thousands(r.rate))
	if r.archived > 0 {
		s += fmt.Sprintf(" (the archive held %.0f%% at the last acknowledgement)", 100*r.archived)
	}
	return s
}

// median is the run with the median rate.
func median(rs []syncResult) syncResult {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b syncResult) int { return cmp.Compare(a.rate, b.rate) })
	return s[len(s)/2]
}

// rates lists the rates of runs, in run order.
func rates(rs []syncResult) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, thousands(r.rate))
	}
	return strings.Join(parts, ", ")
}

// startHub starts a fresh hub on a free loopback port.
func startHub(dir string, noSync bool) (*hub.Hub, error) {
	return hub.Start(hub.Options{Listen: "127.0.0.1:0", StoreDir: dir, NoSync: noSync, Provision: streams.Provision})
}

// rawMessage is the message the agent publishes for a movement of the
// data file whose lineage is lin: the same subject, headers and payload.
func rawMessage(store string, lin central.FileLineage, seq uint64, enqueuedAt time.Time, p *movement.Prepared) *nats.Msg {
	return central.Message{
		File:       lin,
		Store:      store,
		Key:        p.KeyString(),
		Digest:     hex.EncodeToString(p.Digest[:]),
		Seq:        seq,
		Schedule:   p.Schedule,
		EnqueuedAt: enqueuedAt,
		Payload:    p.Payload,
	}.Msg()
}

// rawRig is a hub and a plain JetStream client publishing to it.
type rawRig struct {
	h  *hub.Hub
	nc *nats.Conn
	js jetstream.JetStream
	// lin is the lineage the messages carry: the agent's file's.
	lin central.FileLineage
}

func (b *bench) newRawRig(name string, noSync bool) (*rawRig, error) {
	dir, err := b.dir("sync-" + name)
	if err != nil {
		return nil, err
	}
	h, err := startHub(filepath.Join(dir, "hub"), noSync)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(h.URL())
	if err != nil {
		h.Shutdown()
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(rawWindow))
	if err != nil {
		nc.Close()
		h.Shutdown()
		return nil, err
	}
	return &rawRig{h: h, nc: nc, js: js}, nil
}

func (r *rawRig) close() {
	r.nc.Close()
	r.h.Shutdown()
}

// publish publishes items one at a time with PublishAsync and a window of
// rawWindow, and waits for every acknowledgement. The first gets sequence
// firstSeq in its Rx-Seq header.
func (r *rawRig) publish(ctx context.Context, items []movement.Prepared, firstSeq uint64, enqueuedAt time.Time) (syncResult, error) {
	futs := make([]jetstream.PubAckFuture, 0, len(items))
	start := time.Now()
	for i := range items {
		if i%1024 == 0 && ctx.Err() != nil {
			return syncResult{}, ctx.Err()
		}
		f, err := r.js.PublishMsgAsync(rawMessage(storeSync, r.lin, firstSeq+uint64(i), enqueuedAt, &items[i]), jetstream.WithStallWait(30*time.Second))
		if err != nil {
			return syncResult{}, fmt.Errorf("publish %d: %w", i, err)
		}
		futs = append(futs, f)
	}
	select {
	case <-r.js.PublishAsyncComplete():
	case <-ctx.Done():
		return syncResult{}, ctx.Err()
	case <-time.After(5 * time.Minute):
		return syncResult{}, fmt.Errorf("%d acknowledgements still pending after 5 minutes", r.js.PublishAsyncPending())
	}
	el := time.Since(start)
	for i, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return syncResult{}, fmt.Errorf("publish %d: %w", i, err)
		}
	}
	return syncResult{n: len(items), elapsed: el, rate: rate(len(items), el)}, nil
}

func (r *rawRig) checkStored(ctx context.Context, n int) error {
	return checkStored(ctx, r.h.URL(), n)
}

// engineRig is a hub and a copy of a backlog file for the agent's engine.
type engineRig struct {
	h    *hub.Hub
	dir  string // the hub's and the agent's, removed by close
	path string
	o    settings.Options
}

func (b *bench) newEngineRig(name string, n int, noSync bool) (*engineRig, error) {
	return b.newEngineRigOf(name, storeSync, n, orderRandom, noSync)
}

// newEngineRigOf is a hub and a copy of store's backlog of n in order.
func (b *bench) newEngineRigOf(name, store string, n int, order backlogOrder, noSync bool) (*engineRig, error) {
	dir, err := b.dir("sync-" + name)
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "agent")
	path, err := b.backlogIn(store, n, order, dataDir)
	if err != nil {
		return nil, err
	}
	h, err := startHub(filepath.Join(dir, "hub"), noSync)
	if err != nil {
		return nil, err
	}
	r := &engineRig{h: h, dir: dir, path: path}
	r.o, err = agentOptions(store, dataDir, h.URL())
	if err != nil {
		r.close()
		return nil, err
	}
	// The bench times delivery, not the resume jitter.
	r.o.ResumeJitter = time.Nanosecond
	return r, nil
}

// close shuts the hub down and removes its files and the agent's, so
// that turns after it find the disk as it found it.
func (r *engineRig) close() {
	r.h.Shutdown()
	os.RemoveAll(r.dir)
}

// deliver opens the file, runs a sync.Engine over it until at least target
// movements are synced, and stops the engine and closes the file. The
// result counts the movements synced while it was timed.
func (r *engineRig) deliver(ctx context.Context, target int) (syncResult, error) {
	q, err := queue.Open(queue.Options{Path: r.path, StoreID: r.o.StoreID, MaxAhead: r.o.MaxRetryDelay()})
	if err != nil {
		return syncResult{}, err
	}
	defer q.Close()
	st, err := q.Stats()
	if err != nil {
		return syncResult{}, err
	}
	from := st.Count(queue.Synced)

	e := sync.New(q, r.o.Sync(), nil, nil, nil)
	ectx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- e.Run(ectx) }()
	var synced uint64
	// A million movements on a machine loaded by other work can take more
	// than ten minutes: the deadline grows with the backlog.
	err = waitFor(ctx, 10*time.Minute+time.Duration(target)*time.Millisecond, 5*time.Millisecond, func() (bool, error) {
		st, err := q.Stats()
		if err != nil {
			return false, err
		}
		if x := st.Count(queue.Quarantined); x > 0 {
			return false, fmt.Errorf("%d movements quarantined", x)
		}
		synced = st.Count(queue.Synced)
		return synced >= uint64(target), nil
	})
	el := time.Since(start)
	stop()
	if rerr := <-done; err == nil {
		err = rerr
	}
	if err != nil {
		return syncResult{}, fmt.Errorf("%w (connection: %+v)", err, e.Connection())
	}
	n := int(synced - from)
	return syncResult{n: n, elapsed: el, rate: rate(n, el)}, q.Close()
}

func (r *engineRig) checkStored(ctx context.Context, n int) error {
	return checkStored(ctx, r.h.URL(), n)
}

// drainRun delivers a backlog of n with the agent's default settings
// (atomic batches while a backlog is due) to a fresh hub.
func (b *bench) drainRun(ctx context.Context, name string, n int, noSync bool) (syncResult, error) {
	r, err := b.newEngineRig(name, n, noSync)
	if err != nil {
		return syncResult{}, err
	}
	defer r.close()
	res, err := r.deliver(ctx, n)
	if err != nil {
		return res, err
	}
	return res, r.checkStored(ctx, n)
}

// localDrainRun is the drain without central: see drain.
func (b *bench) localDrainRun(ctx context.Context, n int) (syncResult, error) {
	dir, err := b.dir("sync-local")
	if err != nil {
		return syncResult{}, err
	}
	path, err := b.backlog(storeSync, n, dir)
	if err != nil {
		return syncResult{}, err
	}
	return drain(ctx, path, storeSync)
}

// dueCountCost is the median time of one DueCount over a backlog of n with
// a limit above it.
func (b *bench) dueCountCost(n int) (time.Duration, error) {
	dir, err := b.dir("sync-duecount")
	if err != nil {
		return 0, err
	}
	path, err := b.backlog(storeSync, n, dir)
	if err != nil {
		return 0, err
	}
	q, err := queue.Open(queue.Options{Path: path, StoreID: storeSync})
	if err != nil {
		return 0, err
	}
	defer q.Close()
	var ds []time.Duration
	for range 21 {
		t0 := time.Now()
		got, err := q.DueCount(time.Now(), n+1)
		if err != nil {
			return 0, err
		}
		if got != n {
			return 0, fmt.Errorf("DueCount: %d due, want %d", got, n)
		}
		ds = append(ds, time.Since(t0))
	}
	return quantile(ds, 0.5), nil
}

// checkStored checks that the stream of the hub at url holds exactly n
// messages.
func checkStored(ctx context.Context, url string, n int) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, central.StreamName)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs != uint64(n) {
		return fmt.Errorf("the stream holds %d messages, want %d", info.State.Msgs, n)
	}
	return nil
}
