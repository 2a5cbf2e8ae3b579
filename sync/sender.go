package sync

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
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
	synced  int      // evSettled: movements central stored
	cause   error    // evSystemic: the error behind it (nil for a local failure)
}

type eventKind int

const (
	evConnected eventKind = iota
	evDisconnected
	evAsyncError
	evConnError // an attempt to connect failed
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
// pacing (the connection state and the probe schedule), the suspects and
// the counts of what is in flight; the settler goroutine owns the
// outcomes and the evidence (see settle.go). They share the link and talk
// by events (settler to loop) and flights (loop to settler).
type sender struct {
	q    *queue.Queue
	o    Options
	log  *slog.Logger
	m    *metrics.Metrics
	link *link

	events  chan event
	flights chan *flight
	done    chan struct{} // closed when the loop ends

	// Loop-owned.
	pace     pacing
	diag     diagnosis
	singles  int // single flights not yet settled
	batches  int // batch flights not yet settled
	batchOut bool
	noBatch  bool
	// suspects are movements whose failures made the sender pause: it
	// probes with others while others are due.
	suspects map[uint64]bool
	// batchWait: a backlog is due and the loop waits for the single
	// publishes in the air to settle before it sends a batch.
	batchWait bool
	// next is the batch leased and built while the one before it is in
	// the air, sent as soon as that one is acknowledged; nil when none.
	// Its movements stay leased until then, and are given back when the
	// sender stops sending batches (not online, batches refused, the loop
	// ends).
	next *prepared
	// serial turns the preparing off: each batch is leased and built once
	// the one before it was acknowledged (a benchmark's baseline).
	serial bool
}

// prepared is an atomic batch ready to go: the movements sent alone
// (see sendBatch) and the batch's members with their messages.
type prepared struct {
	alone, batch []*queue.Record
	msgs         []*nats.Msg
}

func newSender(q *queue.Queue, tr transport, o Options, log *slog.Logger, m *metrics.Metrics) *sender {
	o = o.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &sender{
		q: q, o: o, log: log, m: m, link: newLink(tr, m), suspects: make(map[uint64]bool),
		pace:   pacing{probe: o.Probe, resumeJitter: o.ResumeJitter},
		diag:   diagnosis{logEvery: problemLogEvery},
		events: make(chan event, 64),
		// Room for a full window, a batch's worth of oversized movements
		// sent alone, two batches and a probe: the loop never blocks here.
		flights: make(chan *flight, o.MaxInFlight+o.BatchSize+8),
		done:    make(chan struct{}),
	}
	s.link.setServers(o.NATS.Servers)
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

// connection is the sender's state for the status document.
func (s *sender) connection() status.Connection { return s.link.connection() }

// publish carries the pacing's state out to the link (the status
// document, the metrics, the settler) and logs a pause or a resume.
func (s *sender) publish(was int32, why string) {
	st := s.pace.state
	switch {
	case st == stPaused && was != stPaused:
		s.log.Warn("SYNC_PAUSED", "reason", s.pace.reason)
	case st == stOnline && was == stPaused:
		s.log.Info("SYNC_RESUMED", "reason", s.link.reason(), "because", why)
	case st == stOnline && was == stResuming:
		s.log.Info("SYNC_RESUMED", "reason", "reconnected")
	}
	if st == stOnline && was != stOnline {
		clear(s.suspects)
	}
	if st != stOnline {
		s.dropNext()
	}
	s.link.setState(st, s.pace.reason)
}

// problemLogEvery is how often the same reason for not reaching central
// may be logged again after other reasons came between (see diagnosis).
const problemLogEvery = 5 * time.Minute

// problem records err as why the agent cannot reach or use central and
// logs a change of reason. server is the URL it is about ("": the
// configured server the error names).
func (s *sender) problem(now time.Time, err error, server string) {
	reason, detail := Diagnose(err)
	if server == "" {
		server = serverOf(err, s.o.NATS.Servers)
	}
	s.m.CentralError(reason)
	log, unlogged := s.diag.see(now, reason, detail, server)
	if log {
		args := []any{"reason", reason, "detail", detail, "server", server}
		if unlogged > 0 {
			args = append(args, "changes_not_logged", unlogged)
		}
		s.log.Warn("CENTRAL_PROBLEM", args...)
	}
	s.link.setProblem(s.diag.problem())
}

// run is the sender loop. It returns when ctx ends, after the flights in
// the air settled or a short grace time passed (they are keyed, so
// abandoning them is safe).
func (s *sender) run(ctx context.Context) {
	s.noBatch = s.o.NoBatch
	s.pace.probe, s.pace.resumeJitter = s.o.Probe, s.o.ResumeJitter
	settlerCtx, stopSettler := context.WithCancel(context.WithoutCancel(ctx))
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		newSettler(s).run(settlerCtx)
	}()
	defer func() {
		s.dropNext()
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
	was := s.pace.state
	why := ""
	switch ev.kind {
	case evConnected:
		s.link.up(ev.url)
		s.log.Info("CONNECTED", "url", ev.url)
		if s.diag.clear() {
			s.link.setProblem(nil)
		}
		s.pace.connected(now, s.o.Rand())
	case evDisconnected:
		s.link.down()
		reason := "disconnected"
		if ev.err != nil {
			reason = "disconnected: " + ev.err.Error()
		}
		if was != stOffline {
			s.log.Warn("DISCONNECTED", "error", errText(ev.err))
		}
		s.pace.disconnected(reason)
	case evAsyncError:
		// Refused credentials and permissions are diagnosed (and logged
		// once); other asynchronous errors are logged as they come.
		switch reason, _ := Diagnose(ev.err); reason {
		case status.ReasonAuthorization:
			s.problem(now, ev.err, redactURL(s.link.connection().ConnectedURL))
			if was == stOnline || was == stPaused {
				s.pace.pause(now, s.o.Rand(), "systemic:permission: "+ev.err.Error())
			}
		case status.ReasonAuth:
			s.problem(now, ev.err, "")
		default:
			s.log.Warn("NATS_ERROR", "error", errText(ev.err))
		}
	case evConnError:
		s.problem(now, ev.err, "")
	case evSystemic:
		// A cause while offline, or a request cut off by a dropped
		// connection, says nothing about central.
		if ev.cause != nil && (was == stOnline || was == stPaused) && !errors.Is(ev.cause, context.Canceled) {
			s.problem(now, ev.cause, redactURL(s.link.connection().ConnectedURL))
		}
		for _, seq := range ev.seqs {
			s.suspects[seq] = true
		}
		s.pace.systemic(now, s.o.Rand(), ev.reason)
	case evBatchSent:
		s.batchOut = false
	case evNoBatch:
		s.dropNext()
		if !s.noBatch {
			s.noBatch = true
			s.log.Warn("SYNC_BATCH_DISABLED", "reason", "the stream does not accept atomic batches (allow_atomic); sending one at a time")
		}
	case evSettled:
		s.singles -= ev.singles
		s.batches -= ev.batches
		// Central stored something: it is reachable and usable.
		if (ev.synced > 0 || ev.probe && ev.ok) && s.diag.clear() {
			s.link.setProblem(nil)
		}
		if ev.probe {
			if !ev.ok {
				for _, seq := range ev.seqs {
					s.suspects[seq] = true
				}
			}
			s.pace.probed(now, s.o.Rand(), ev.ok)
			why = "probe succeeded"
		}
	}
	s.publish(was, why)
}

// step does what the pacing says at now: finish a resume, send a probe,
// or fill the window.
func (s *sender) step(now time.Time) {
	if s.link.transport() == nil {
		return // connected a moment before the transport was made
	}
	was := s.pace.state
	switch s.pace.next(now) {
	case stepResume:
		s.pace.resume()
		s.publish(was, "reconnected")
		s.fill(now)
	case stepProbe:
		probe, err := s.probe(now)
		if err != nil {
			s.queueError(now, err)
			return
		}
		if probe == nil {
			// Nothing to probe with: the next publish will tell.
			s.pace.resume()
			s.publish(was, "nothing due to probe with")
			s.fill(now)
			return
		}
		s.pace.probing()
		s.sendSingles(now, []*queue.Record{probe}, true)
	case stepFill:
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
	was := s.pace.state
	s.pace.pause(now, s.o.Rand(), "local:queue_error: "+err.Error())
	s.publish(was, "")
}

// fill sends due movements: an atomic batch when a backlog is due and no
// single publish is in the air, single publishes otherwise. While a batch
// is in the air it prepares the next one.
func (s *sender) fill(now time.Time) {
	s.batchWait = false
	if s.batchOut {
		if !s.serial {
			s.prepareNext(now)
		}
		return
	}
	if s.next != nil {
		if s.batches >= 2 || s.singles > 0 {
			s.batchWait = true // sent once a flight settles
			return
		}
		p := s.next
		s.next = nil
		s.sendPrepared(now, p)
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
		f.fut, f.err = s.link.transport().publishAsync(message(s.o.StoreID, s.q.Lineage(), r, false))
		s.singles++
		s.flights <- f
	}
	s.m.Publish("single", len(items), 0)
}

// prepareNext leases and builds the next batch while one is in the air,
// when a backlog is due: its movements are the oldest due after those in
// the air, as they would be once that one is acknowledged, and it is sent
// in the same order (the loop sends one batch at a time).
func (s *sender) prepareNext(now time.Time) {
	if s.next != nil || s.noBatch || s.pace.state != stOnline {
		return
	}
	n, err := s.q.DueCount(now, s.o.BatchThreshold)
	if err != nil || n < s.o.BatchThreshold {
		return // the next fill decides, and reports a failing file
	}
	items, err := s.q.Lease(now, s.o.BatchSize)
	if err != nil || len(items) == 0 {
		return
	}
	s.next = s.prepare(items)
}

// dropNext gives the prepared batch's movements back unchanged.
func (s *sender) dropNext() {
	if s.next == nil {
		return
	}
	p := s.next
	s.next = nil
	rs := append(p.alone, p.batch...)
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	s.q.Release(out...)
}

// prepare splits leased movements into those sent alone and the batch,
// and builds the batch's messages. Movements that might not fit the
// server's max_payload go alone: a single publish refuses them precisely,
// without failing a batch. So do movements that failed before: a poison
// movement would fail every batch it is in.
func (s *sender) prepare(items []*queue.Record) *prepared {
	p := &prepared{}
	limit := s.link.transport().maxPayload()
	for _, r := range items {
		if limit > 0 && int64(len(r.Payload))+1024 > limit || r.Attempts > 0 {
			p.alone = append(p.alone, r)
		} else {
			p.batch = append(p.batch, r)
		}
	}
	p.msgs = make([]*nats.Msg, len(p.batch))
	l := s.q.Lineage()
	for i, r := range p.batch {
		p.msgs[i] = message(s.o.StoreID, l, r, i == 0)
	}
	return p
}

// sendBatch publishes leased movements as an atomic batch (see prepare
// and sendPrepared).
func (s *sender) sendBatch(now time.Time, items []*queue.Record) {
	if len(items) == 0 {
		return
	}
	s.sendPrepared(now, s.prepare(items))
}

// sendPrepared publishes a prepared batch from its own goroutine, and its
// movements that go alone as single publishes; the loop goes on, prepares
// the next batch and sends it once this one is acknowledged.
func (s *sender) sendPrepared(now time.Time, p *prepared) {
	if len(p.alone) > 0 {
		s.sendSingles(now, p.alone, false)
	}
	if len(p.batch) == 0 {
		return
	}
	batch, msgs, tr := p.batch, p.msgs, s.link.transport()
	f := &flight{items: batch, batch: make(chan batchResult, 1), sentAt: now}
	s.batchOut = true
	s.batches++
	s.flights <- f
	s.m.Publish("batch", len(batch), 0)
	go func() {
		ctx, cancel := context.WithTimeout(s.link.context(), s.batchTimeout(len(msgs)))
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
	if s.pace.state != stOnline {
		return s.pace.wake(now)
	}
	if s.batchOut || s.batchWait || s.singles >= s.o.MaxInFlight {
		return -1 // until a settlement or an event
	}
	next, err := s.q.NextDue(now)
	if err != nil || next.IsZero() {
		return -1
	}
	return max(next.Sub(now), time.Millisecond)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
