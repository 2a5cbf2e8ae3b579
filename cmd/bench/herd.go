package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	stdsync "sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/sync"
)

// herdBin is the width of the bins stored messages are counted in.
const herdBin = 100 * time.Millisecond

// benchHerd simulates a fleet of stores resuming when central comes back
// after an outage: each store has its own data file, queue and sync.Engine
// with its own connection. Central (one SyncAlways hub) is stopped while
// every store is online; each store then accumulates a few movements;
// central comes back on the same port and store. Every stored message
// carries the time central stored it, so after the recovery the bench
// reads them all back and counts them per 100 ms; a plain subscription on
// the movement subjects counts the publishes as they arrive, too. It runs
// once with the agent's jitter (its resume jitter, and nats.go's jitter on
// reconnect attempts: every second plus up to a second) and once with both
// switched off as the baseline, each with a fresh hub and fleet. Peak/mean
// is over the delivery: from the first message stored to the last.
func benchHerd(ctx context.Context, b *bench) error {
	const scn = "4 herd"
	s := b.size
	jit, err := b.herdRun(ctx, "jitter", s.herdJitter)
	if err != nil {
		return fmt.Errorf("with resume jitter: %w", err)
	}
	b.logf("herd: resume jitter %s: %s", s.herdJitter, jit)
	nojit, err := b.herdRun(ctx, "nojitter", 0)
	if err != nil {
		return fmt.Errorf("without resume jitter: %w", err)
	}
	b.logf("herd: no resume jitter: %s", nojit)

	fleet := fmt.Sprintf("%d stores × %d movements", s.herdStores, s.herdPerStore)
	b.rep.value(scn, "herd_peak_to_mean_jitter", fmt.Sprintf("%s, resume jitter %s: peak/mean of stored per 100 ms, first to last stored (%s)", fleet, s.herdJitter, jit.short()),
		jit.peakToMean, "", atMost(2))
	b.rep.value(scn, "herd_peak_to_mean_nojitter", fmt.Sprintf("baseline: the same with jitter off (no resume jitter, no reconnect jitter) (%s)", nojit.short()),
		nojit.peakToMean, "", nil)
	b.rep.ratio(scn, "herd_peak_to_mean_jitter_vs_nojitter", "peak/mean with resume jitter vs without (the target's \"well below the baseline\")",
		jit.peakToMean/nojit.peakToMean, fmt.Sprintf("no resume jitter: peak/mean %.2f", nojit.peakToMean), below(1))
	b.rep.value(scn, "herd_peak_per_100ms_jitter", "peak stored per 100 ms, resume jitter", float64(jit.peak), "msgs", nil)
	b.rep.value(scn, "herd_peak_per_100ms_nojitter", "peak stored per 100 ms, no resume jitter", float64(nojit.peak), "msgs", nil)
	b.rep.ratio(scn, "herd_peak_jitter_vs_nojitter", "absolute peak per 100 ms with resume jitter vs without",
		float64(jit.peak)/float64(nojit.peak), fmt.Sprintf("no resume jitter: peak %d per 100 ms", nojit.peak), nil)
	b.rep.value(scn, "herd_arrival_peak_to_mean_jitter", fmt.Sprintf("publishes arriving at central per 100 ms (a plain subscription), resume jitter: peak/mean (peak %d, %d arrived)", jit.arrivals.peak, jit.arrivals.count),
		jit.arrivals.peakToMean, "", nil)
	b.rep.value(scn, "herd_arrival_peak_to_mean_nojitter", fmt.Sprintf("publishes arriving at central per 100 ms, no resume jitter: peak/mean (peak %d, %d arrived)", nojit.arrivals.peak, nojit.arrivals.count),
		nojit.arrivals.peakToMean, "", nil)
	b.rep.value(scn, "herd_recovery_s_jitter", "recovery window (restart to last stored), resume jitter", jit.window.Seconds(), "s", nil)
	b.rep.value(scn, "herd_recovery_s_nojitter", "recovery window (restart to last stored), no resume jitter", nojit.window.Seconds(), "s", nil)
	return nil
}

// herdResult is one fleet recovery.
type herdResult struct {
	count      int           // messages counted
	window     time.Duration // restart to the last of them
	first      time.Duration // restart to the first of them
	bins       []int
	peak       int
	mean       float64
	peakToMean float64
	// arrivals counts publishes as they reached central (first attempts
	// and any resends).
	arrivals *herdResult
}

func (r herdResult) short() string {
	return fmt.Sprintf("peak %d, mean %.1f per 100 ms over %.1f s of delivery", r.peak, r.mean, float64(len(r.bins))*herdBin.Seconds())
}

func (r herdResult) String() string {
	var sb strings.Builder
	for i, n := range r.bins {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprint(&sb, n)
	}
	out := fmt.Sprintf("%d, first after %s, last after %s; peak %d, mean %.1f, peak/mean %.2f; per 100 ms: %s",
		r.count, r.first.Round(time.Millisecond), r.window.Round(time.Millisecond), r.peak, r.mean, r.peakToMean, sb.String())
	if r.arrivals != nil {
		out = "stored " + out + "\n\tarrived " + r.arrivals.String()
	}
	return out
}

// herdStore is one simulated store.
type herdStore struct {
	id   string
	q    *queue.Queue
	e    *sync.Engine
	done chan error
}

// herdRun runs one outage and recovery of a fresh fleet with the given
// resume jitter and counts the stored messages from the restart on.
func (b *bench) herdRun(ctx context.Context, name string, jitter time.Duration) (res herdResult, err error) {
	s := b.size
	dir, err := b.dir("herd-" + name)
	if err != nil {
		return res, err
	}
	hubDir := filepath.Join(dir, "hub")
	h, err := startHub(hubDir, false)
	if err != nil {
		return res, err
	}
	defer func() { h.Shutdown() }()
	addr := h.Addr()

	ectx, stopEngines := context.WithCancel(ctx)
	stores := make([]*herdStore, 0, s.herdStores)
	defer func() {
		stopEngines()
		for _, st := range stores {
			if rerr := <-st.done; rerr != nil && err == nil {
				err = fmt.Errorf("store %s: %w", st.id, rerr)
			}
			st.q.Close()
		}
	}()
	for i := range s.herdStores {
		id := fmt.Sprintf("H%05d", i)
		dataDir := filepath.Join(dir, id)
		o, err := agentOptions(id, dataDir, h.URL())
		if err != nil {
			return res, err
		}
		if jitter > 0 {
			o.ResumeJitter = jitter
		} else {
			// The baseline: no jitter at all, neither the agent's resume
			// jitter nor nats.go's on its reconnect attempts.
			o.ResumeJitter = time.Nanosecond
			o.NATS.ReconnectJitter = 0
		}
		q, err := queue.Open(queue.Options{Path: settings.DataFile(dataDir), StoreID: id, MaxAhead: o.MaxRetryDelay()})
		if err != nil {
			return res, err
		}
		st := &herdStore{id: id, q: q, e: sync.New(q, o.Sync(), nil, nil, nil), done: make(chan error, 1)}
		stores = append(stores, st)
		go func() { st.done <- st.e.Run(ectx) }()
	}
	if err := waitState(ctx, stores, status.Online, 30*time.Second+jitter); err != nil {
		return res, fmt.Errorf("before the outage: %w", err)
	}

	// The outage: central stops; every store notices and keeps working.
	outage := time.Now()
	h.Shutdown()
	if err := waitState(ctx, stores, status.Offline, 30*time.Second); err != nil {
		return res, fmt.Errorf("during the outage: %w", err)
	}
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, st := range stores {
		g.Go(func() error {
			_, err := st.q.Enqueue(generateN(st.id, 0, s.herdPerStore, b.now))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	if wait := s.herdOutage - time.Since(outage); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}

	// Central comes back on the same port and store.
	h2, err := restartHub(hub.Options{Listen: addr, StoreDir: hubDir, Provision: streams.Provision})
	if err != nil {
		return res, err
	}
	h = h2
	restarted := time.Now()
	want := s.herdStores * s.herdPerStore
	nc, err := nats.Connect(h.URL())
	if err != nil {
		return res, err
	}
	defer nc.Close()
	// A plain subscription sees each publish as it reaches central, before
	// it is stored: the demand, where the stored count shows what central
	// managed to store.
	var mu stdsync.Mutex
	var arrivals []time.Time
	sub, err := nc.Subscribe(central.StreamSubjects, func(*nats.Msg) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	})
	if err != nil {
		return res, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return res, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return res, err
	}
	stream, err := js.Stream(ctx, central.StreamName)
	if err != nil {
		return res, err
	}
	err = waitFor(ctx, 2*time.Minute+jitter, herdBin, func() (bool, error) {
		info, err := stream.Info(ctx)
		if err != nil {
			return false, err
		}
		return info.State.Msgs >= uint64(want), nil
	})
	if err != nil {
		return res, fmt.Errorf("waiting for %d messages to be stored: %w", want, err)
	}
	if err := sub.Drain(); err != nil {
		return res, err
	}
	if err := waitFor(ctx, 10*time.Second, 10*time.Millisecond, func() (bool, error) { return !sub.IsValid(), nil }); err != nil {
		return res, fmt.Errorf("draining the arrivals subscription: %w", err)
	}
	times, err := storedTimes(ctx, js, want)
	if err != nil {
		return res, err
	}
	res = binTimes(times, restarted, herdBin)
	mu.Lock()
	a := binTimes(arrivals, restarted, herdBin)
	mu.Unlock()
	res.arrivals = &a
	return res, nil
}

// waitState waits until every store's sender reports state.
func waitState(ctx context.Context, stores []*herdStore, state string, timeout time.Duration) error {
	err := waitFor(ctx, timeout, 50*time.Millisecond, func() (bool, error) {
		for _, st := range stores {
			if st.e.Connection().State != state {
				return false, nil
			}
		}
		return true, nil
	})
	if errors.Is(err, errTimeout) {
		n := 0
		for _, st := range stores {
			if st.e.Connection().State != state {
				n++
			}
		}
		return fmt.Errorf("%d of %d stores not %s after %s", n, len(stores), state, timeout)
	}
	return err
}

// restartHub starts a hub on a fixed port, retrying while the port is
// still held by the server that stopped.
func restartHub(o hub.Options) (*hub.Hub, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := hub.Start(o)
		if err == nil || time.Now().After(deadline) {
			return h, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// storedTimes reads the time central stored each of the stream's first n
// messages.
func storedTimes(ctx context.Context, js jetstream.JetStream, n int) ([]time.Time, error) {
	c, err := js.OrderedConsumer(ctx, central.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	times := make([]time.Time, 0, n)
	for len(times) < n {
		batch, err := c.Fetch(min(n-len(times), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			times = append(times, md.Timestamp)
			got++
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if got == 0 {
			return nil, fmt.Errorf("read %d of %d stored messages, then nothing", len(times), n)
		}
	}
	return times, nil
}

// binTimes counts times per bin from the first of them to the last, and
// notes how long after start the first and the last came.
func binTimes(times []time.Time, start time.Time, bin time.Duration) herdResult {
	var r herdResult
	r.count = len(times)
	if len(times) == 0 {
		return r
	}
	first, last := times[0], times[0]
	for _, t := range times {
		if t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	r.first = max(first.Sub(start), 0)
	r.window = max(last.Sub(start), 0)
	// The load is what central takes while the fleet delivers: from the
	// first message stored to the last. (The seconds before the first
	// reconnect would only dilute the mean.)
	r.bins = make([]int, int(last.Sub(first)/bin)+1)
	for _, t := range times {
		r.bins[int(t.Sub(first)/bin)]++
	}
	for _, n := range r.bins {
		r.peak = max(r.peak, n)
	}
	r.mean = float64(r.count) / float64(len(r.bins))
	r.peakToMean = float64(r.peak) / r.mean
	return r
}
