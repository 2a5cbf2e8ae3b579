package sync

import (
	"context"
	"log/slog"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/status"
)

// Connection states of the sender. resuming is "connected, waiting out the
// resume jitter"; it is reported as offline.
const (
	stOffline int32 = iota
	stResuming
	stOnline
	stPaused
)

// event is something the sender loop reacts to.
type event struct {
	kind    eventKind
	err     error
	url     string
	reason  string
	singles int      // single flights settled
	batches int      // batch flights settled
	probe   bool     // a probe was among them
	seqs    []uint64 // evSystemic: movements not to probe with; evSettled: the probe's
	ok      bool     // for a probe: it succeeded
}

type eventKind int

const (
	evConnected eventKind = iota
	evDisconnected
	evAsyncError
	evSettled
	evSystemic
	evBatchSent
	evNoBatch
)

// flight is one publish (or atomic batch) on its way, in send order.
type flight struct {
	items  []*queue.Record
	fut    future           // a single publish
	batch  chan batchResult // an atomic batch
	err    error            // a single publish that failed at once
	sentAt time.Time
	probe  bool
}

type batchResult struct {
	lastSeq uint64
	err     error
}

// sender moves due movements to central. Its loop goroutine owns the
// connection state and the counts of what is in flight; the settler
// goroutine owns outcomes.
type sender struct {
	q   *queue.Queue
	o   Options
	log *slog.Logger
	m   *metrics.Metrics

	events  chan event
	flights chan *flight
	done    chan struct{} // closed when the loop ends
	state   atomic.Int32

	// Loop-owned.
	singles      int // single flights not yet settled
	batches      int // batch flights not yet settled
	batchOut     bool
	probeOut     bool
	probeAttempt int
	resumeAt     time.Time
	probeAt      time.Time
	noBatch      bool
	// suspects are movements whose failures made the sender pause: it
	// probes with others while others are due.
	suspects map[uint64]bool
	// batchWait: a backlog is due and the loop waits for the single
	// publishes in the air to settle before it sends a batch.
	batchWait bool

	mu   stdsync.Mutex // guards snap, the link context and the transport
	snap status.Connection
	tr   transport // of the current connection
	// linkCtx lives as long as one connection: requests waiting on the
	// connection (batches, read-backs) end at once when it drops, instead
	// of waiting out their timeouts.
	linkCtx    context.Context
	linkCancel context.CancelFunc
}

func newSender(q *queue.Queue, tr transport, o Options, log *slog.Logger, m *metrics.Metrics) *sender {
	o = o.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &sender{
		q: q, tr: tr, o: o, log: log, m: m, suspects: make(map[uint64]bool),
		events: make(chan event, 64),
		// Room for a full window, a batch's worth of oversized movements
		// sent alone, two batches and a probe: the loop never blocks here.
		flights: make(chan *flight, o.MaxInFlight+o.BatchSize+8),
		done:    make(chan struct{}),
	}
	now := time.Now().UTC()
	s.snap = status.Connection{State: status.Offline, Since: &now}
	s.linkCtx, s.linkCancel = context.WithCancel(context.Background())
	s.linkCancel() // not connected yet
	m.SetConnState(status.Offline)
	return s
}

// notify hands an event to the loop; after the loop ended it is dropped.
// The loop spends its time in its select or in short local work, so this
// waits briefly at most.
func (s *sender) notify(ev event) {
	select {
	case s.events <- ev:
	case <-s.done:
	}
}

// transport is the current connection's transport.
func (s *sender) transport() transport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tr
}

func (s *sender) setTransport(tr transport) {
	s.mu.Lock()
	s.tr = tr
	s.mu.Unlock()
}

// link is the context of the current connection; it is cancelled when the
// connection drops.
func (s *sender) link() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.linkCtx
}

// connection is the sender's state for the status document.
func (s *sender) connection() status.Connection {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.snap
	c.Servers = append([]string(nil), s.snap.Servers...)
	return c
}

func (s *sender) setState(st int32, reason string) {
	old := s.state.Swap(st)
	name := stateName(st)
	s.mu.Lock()
	if old != st || s.snap.Reason != reason {
		now := time.Now().UTC()
		if stateName(old) != name {
			s.snap.Since = &now
		}
		s.snap.State, s.snap.Reason = name, reason
	}
	s.mu.Unlock()
	s.m.SetConnState(name)
}

func stateName(st int32) string {
	switch st {
	case stOnline:
		return status.Online
	case stPaused:
		return status.Paused
	}
	return status.Offline
}

// run is the sender loop. It returns when ctx ends, after the flights in
// the air settled or a short grace time passed (they are keyed, so
// abandoning them is safe).
func (s *sender) run(ctx context.Context) {
	s.noBatch = s.o.NoBatch
	settlerCtx, stopSettler := context.WithCancel(context.WithoutCancel(ctx))
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		s.settle(settlerCtx)
	}()
	defer func() {
		close(s.done)
		close(s.flights)
		grace := time.NewTimer(min(s.o.AttemptTimeout, 3*time.Second))
		defer grace.Stop()
		select {
		case <-settled:
		case <-grace.C:
			stopSettler()
			<-settled
		}
		stopSettler()
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		s.step(now)
		wait := s.nextWake(now)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if wait >= 0 {
			timer.Reset(wait)
		}
		var timerC <-chan time.Time
		if wait >= 0 {
			timerC = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case ev := <-s.events:
			s.handle(ev)
		case <-s.q.Changed():
		case <-timerC:
		}
	}
}

// handle applies one event to the loop's state.
func (s *sender) handle(ev event) {
	now := time.Now()
	st := s.state.Load()
	switch ev.kind {
	case evConnected:
		s.mu.Lock()
		s.snap.ConnectedURL = ev.url
		s.linkCancel()
		s.linkCtx, s.linkCancel = context.WithCancel(context.Background())
		s.mu.Unlock()
		s.log.Info("CONNECTED", "url", ev.url)
		if st == stOffline {
			s.resumeAt = now.Add(time.Duration(s.o.Rand() * float64(s.o.ResumeJitter)))
			s.setState(stResuming, "connected; resuming after a random wait of up to sync.resume_jitter")
		}
	case evDisconnected:
		s.mu.Lock()
		s.snap.ConnectedURL = ""
		s.linkCancel()
		s.mu.Unlock()
		reason := "disconnected"
		if ev.err != nil {
			reason = "disconnected: " + ev.err.Error()
		}
		if st != stOffline {
			s.log.Warn("DISCONNECTED", "error", errText(ev.err))
		}
		s.probeOut = false
		s.setState(stOffline, reason)
	case evAsyncError:
		if isPermission(ev.err) && (st == stOnline || st == stPaused) {
			s.pause(now, "systemic:permission: "+ev.err.Error())
		} else {
			s.log.Warn("NATS_ERROR", "error", errText(ev.err))
		}
	case evSystemic:
		for _, seq := range ev.seqs {
			s.suspects[seq] = true
		}
		if st == stOnline {
			s.pause(now, ev.reason)
		}
	case evBatchSent:
		s.batchOut = false
	case evNoBatch:
		if !s.noBatch {
			s.noBatch = true
			s.log.Warn("SYNC_BATCH_DISABLED", "reason", "the stream does not accept atomic batches (allow_atomic); sending one at a time")
		}
	case evSettled:
		s.singles -= ev.singles
		s.batches -= ev.batches
		if ev.probe {
			s.probeOut = false
			switch {
			case st != stPaused:
			case ev.ok:
				s.resume("probe succeeded")
			default:
				for _, seq := range ev.seqs {
					s.suspects[seq] = true
				}
				s.probeAttempt++
				s.probeAt = now.Add(s.o.Probe.Delay(s.probeAttempt, s.o.Rand()))
			}
		}
	}
}

func (s *sender) pause(now time.Time, reason string) {
	if s.state.Load() != stPaused {
		s.probeAttempt = 0
		s.log.Warn("SYNC_PAUSED", "reason", reason)
	}
	s.probeAt = now.Add(s.o.Probe.Delay(s.probeAttempt, s.o.Rand()))
	s.setState(stPaused, reason)
}

func (s *sender) resume(why string) {
	s.mu.Lock()
	reason := s.snap.Reason
	s.mu.Unlock()
	s.probeAttempt = 0
	clear(s.suspects)
	s.log.Info("SYNC_RESUMED", "reason", reason, "because", why)
	s.setState(stOnline, "")
}

// step does what the state allows at now: finish a resume, send a probe,
// or fill the window.
func (s *sender) step(now time.Time) {
	if s.transport() == nil {
		return // connected a moment before the transport was made
	}
	switch s.state.Load() {
	case stResuming:
		if !now.Before(s.resumeAt) {
			s.log.Info("SYNC_RESUMED", "reason", "reconnected")
			s.setState(stOnline, "")
		}
	case stPaused:
		if !s.probeOut && !now.Before(s.probeAt) {
			probe, err := s.probe(now)
			if err != nil {
				s.queueError(now, err)
				return
			}
			if probe == nil {
				// Nothing to probe with: the next publish will tell.
				s.resume("nothing due to probe with")
				return
			}
			s.probeOut = true
			s.sendSingles(now, []*queue.Record{probe}, true)
		}
	}
	if s.state.Load() == stOnline {
		s.fill(now)
	}
}

// probe leases the movement to probe central with: the oldest due that is
// not a suspect, or the oldest suspect when only suspects are due.
func (s *sender) probe(now time.Time) (*queue.Record, error) {
	items, err := s.q.Lease(now, len(s.suspects)+1)
	if err != nil || len(items) == 0 {
		return nil, err
	}
	pick := items[0]
	for _, r := range items {
		if !s.suspects[r.Seq] {
			pick = r
			break
		}
	}
	for _, r := range items {
		if r != pick {
			s.q.Release(r.Seq)
		}
	}
	return pick, nil
}

// queueError pauses the sender on a failure to read the data file, so it
// retries with backoff instead of spinning.
func (s *sender) queueError(now time.Time, err error) {
	s.log.Error("QUEUE_ERROR", "error", err.Error())
	s.pause(now, "local:queue_error: "+err.Error())
}

// fill sends due movements: an atomic batch when a backlog is due and no
// single publish is in the air, single publishes otherwise.
func (s *sender) fill(now time.Time) {
	s.batchWait = false
	if s.batchOut {
		return
	}
	if !s.noBatch && s.batches < 2 {
		n, err := s.q.DueCount(now, s.o.BatchThreshold)
		if err != nil {
			s.queueError(now, err)
			return
		}
		if n >= s.o.BatchThreshold {
			if s.singles > 0 {
				s.batchWait = true // let the window drain, then batch
				return
			}
			items, err := s.q.Lease(now, s.o.BatchSize)
			if err != nil {
				s.queueError(now, err)
				return
			}
			s.sendBatch(now, items)
			return
		}
	}
	free := s.o.MaxInFlight - s.singles
	if free <= 0 {
		return
	}
	items, err := s.q.Lease(now, free)
	if err != nil {
		s.queueError(now, err)
		return
	}
	s.sendSingles(now, items, false)
}

func (s *sender) sendSingles(now time.Time, items []*queue.Record, probe bool) {
	for _, r := range items {
		f := &flight{items: []*queue.Record{r}, sentAt: now, probe: probe}
		f.fut, f.err = s.transport().publishAsync(message(s.o.StoreID, r))
		s.singles++
		s.flights <- f
	}
	s.m.Publish("single", len(items), 0)
}

// sendBatch publishes an atomic batch from its own goroutine; the loop goes
// on, and may start the next batch once this one is acknowledged.
func (s *sender) sendBatch(now time.Time, items []*queue.Record) {
	if len(items) == 0 {
		return
	}
	// Movements that might not fit the server's max_payload go alone: a
	// single publish refuses them precisely, without failing a batch.
	var batch, alone []*queue.Record
	tr := s.transport()
	limit := tr.maxPayload()
	for _, r := range items {
		if limit > 0 && int64(len(r.Payload))+1024 > limit {
			alone = append(alone, r)
		} else {
			batch = append(batch, r)
		}
	}
	if len(alone) > 0 {
		s.sendSingles(now, alone, false)
	}
	if len(batch) == 0 {
		return
	}
	msgs := make([]*nats.Msg, len(batch))
	for i, r := range batch {
		msgs[i] = message(s.o.StoreID, r)
	}
	f := &flight{items: batch, batch: make(chan batchResult, 1), sentAt: now}
	s.batchOut = true
	s.batches++
	s.flights <- f
	s.m.Publish("batch", len(batch), 0)
	go func() {
		ctx, cancel := context.WithTimeout(s.link(), s.batchTimeout(len(msgs)))
		defer cancel()
		seq, err := tr.publishBatch(ctx, msgs)
		f.batch <- batchResult{lastSeq: seq, err: err}
		s.notify(event{kind: evBatchSent})
	}()
}

// batchTimeout scales the attempt timeout with the batch: a thousand
// fsynced messages take longer than one.
func (s *sender) batchTimeout(n int) time.Duration {
	return s.o.AttemptTimeout + time.Duration(n)*time.Millisecond*5
}

// nextWake is how long the loop may sleep: until the next due movement,
// the end of the resume jitter, or the next probe (-1: until an event).
func (s *sender) nextWake(now time.Time) time.Duration {
	switch s.state.Load() {
	case stResuming:
		return max(s.resumeAt.Sub(now), 0)
	case stPaused:
		if s.probeOut {
			return -1
		}
		return max(s.probeAt.Sub(now), 0)
	case stOnline:
		if s.batchOut || s.batchWait || s.singles >= s.o.MaxInFlight {
			return -1 // until a settlement or an event
		}
		next, err := s.q.NextDue(now)
		if err != nil || next.IsZero() {
			return -1
		}
		return max(next.Sub(now), time.Millisecond)
	}
	return -1
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// policy is the retry policy of a class.
func (s *sender) policy(c movement.Class) retry.Policy {
	if c == movement.Controlled {
		return s.o.Controlled
	}
	return s.o.Ordinary
}
