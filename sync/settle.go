package sync

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/retry"
)

// maxSettleGroup bounds the outcomes committed in one transaction.
const maxSettleGroup = 2048

// outcome is the judged result of one movement's attempt.
type outcome struct {
	rec       *queue.Record
	v         verdict // outcome Stored for a plain acknowledgement
	streamSeq uint64
	text      string // error text, for the failure context
	err       error  // the error, when there was one
	probe     bool
	// pending, when set, delivers the outcome once central's copy was read
	// back (see verify); the other fields are not yet meaningful.
	pending chan outcome
}

// maxVerifies bounds the read-backs in flight at once.
const maxVerifies = 64

// settler is the settle goroutine's state: it owns the outcomes and the
// evidence (blame), and reaches the loop only by events.
type settler struct {
	q        *queue.Queue
	o        Options
	log      *slog.Logger
	m        *metrics.Metrics
	link     *link
	flights  <-chan *flight
	notify   func(event)
	blame    *blame
	verifies chan struct{}
}

func newSettler(s *sender) *settler {
	return &settler{q: s.q, o: s.o, log: s.log, m: s.m, link: s.link, flights: s.flights, notify: s.notify,
		blame: newBlame(s.o.SystemicAfter, s.o.InProcessRetries), verifies: make(chan struct{}, maxVerifies)}
}

// run waits for the flights in send order, judges their outcomes and
// commits them in groups. It ends when the flights channel is closed and
// drained, or when ctx ends (abandoning what is still in the air).
func (st *settler) run(ctx context.Context) {
	var next *flight
	for {
		f := next
		next = nil
		if f == nil {
			var ok bool
			f, ok = st.take(ctx)
			if !ok {
				st.q.Release(seqs(st.blame.drop())...)
				return
			}
		}
		var outs []outcome
		var singles, batches int
		var probeSeq []uint64
		add := func(f *flight, rs []outcome) {
			outs = append(outs, rs...)
			if f.batch != nil {
				batches++
			} else {
				singles++
			}
			if f.probe {
				probeSeq = append(probeSeq, f.items[0].Seq)
			}
		}
		rs, ok := st.resolve(ctx, f, true)
		if !ok {
			return // shutting down: abandon
		}
		add(f, rs)
	coalesce:
		for len(outs) < maxSettleGroup {
			select {
			case g, open := <-st.flights:
				if !open {
					break coalesce
				}
				rs, ready := st.resolve(ctx, g, false)
				if !ready {
					next = g
					break coalesce
				}
				add(g, rs)
			default:
				break coalesce
			}
		}
		for i := range outs {
			if outs[i].pending != nil {
				p := outs[i].probe
				outs[i] = <-outs[i].pending
				outs[i].probe = p
			}
			st.m.Outcome(outcomeLabel(outs[i].v), 1)
		}
		online := st.link.online()
		r := st.blame.settle(outs, online)
		// More evidence is on its way while flights wait; a probe, or a
		// loop that is not online, has none to wait for.
		if r.ask && (next == nil && len(st.flights) == 0 || !online || len(probeSeq) > 0) {
			r = r.and(st.ask(ctx))
		}
		st.carry(r, outs)
		st.notify(event{kind: evSettled, singles: singles, batches: batches, probe: len(probeSeq) > 0, ok: r.probeOK, seqs: probeSeq, synced: len(r.acks)})
	}
}

// take waits for the next flight. While failures are held for evidence
// and nothing more is sent for an attempt timeout, the evidence will not
// come from other movements: blame decides on what it has, asking central
// whether it is alive where a failure went unanswered.
func (st *settler) take(ctx context.Context) (*flight, bool) {
	for {
		if len(st.blame.held) == 0 {
			select {
			case f, ok := <-st.flights:
				return f, ok
			case <-ctx.Done():
				return nil, false
			}
		}
		t := time.NewTimer(st.o.AttemptTimeout)
		select {
		case f, ok := <-st.flights:
			t.Stop()
			return f, ok
		case <-ctx.Done():
			t.Stop()
			return nil, false
		case <-t.C:
		}
		r := st.blame.quiet()
		if r.ask {
			r = st.ask(ctx)
		}
		st.carry(r, nil)
	}
}

// ask asks central whether it is alive for this store (the transport's
// liveness probe, bounded by an attempt timeout and by the connection),
// and lets blame judge the held failures by the answer.
func (st *settler) ask(ctx context.Context) ruling {
	err := st.alive(ctx)
	st.log.Info("SYNC_ALIVE", "answered", err == nil, "held", len(st.blame.held), "error", errText(err))
	return st.blame.alive(err)
}

// alive probes central's liveness for this store: nil when it answered.
func (st *settler) alive(ctx context.Context) error {
	tr := st.link.transport()
	if tr == nil {
		return errors.New("sync: not connected")
	}
	actx, cancel := context.WithTimeout(st.link.context(), st.o.AttemptTimeout)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	return tr.alive(actx, st.o.StoreID)
}

// resolve waits (or, with block false, only checks) for a flight's result
// and judges it. ok is false when the result is not there yet (or the
// settler is shutting down).
func (st *settler) resolve(ctx context.Context, f *flight, block bool) ([]outcome, bool) {
	if f.batch != nil {
		var br batchResult
		if block {
			select {
			case br = <-f.batch:
			case <-ctx.Done():
				return nil, false
			}
		} else {
			select {
			case br = <-f.batch:
			default:
				return nil, false
			}
		}
		st.m.Publish("batch", 0, time.Since(f.sentAt))
		outs := st.judgeBatch(ctx, f, br)
		return outs, true
	}
	r := f.items[0]
	var ack *jetstream.PubAck
	err := f.err
	if err == nil {
		if block {
			select {
			case ack = <-f.fut.Ok():
			case err = <-f.fut.Err():
			case <-ctx.Done():
				return nil, false
			}
		} else {
			select {
			case ack = <-f.fut.Ok():
			case err = <-f.fut.Err():
			default:
				return nil, false
			}
		}
		st.m.Publish("single", 0, time.Since(f.sentAt))
	}
	o := st.judge(ctx, r, ack, err)
	o.probe = f.probe
	return []outcome{o}, true
}

// judge turns one publish result into an outcome. When central says the
// subject is already taken, central's copy is read back in the background
// (many at once: after an outage with lost acknowledgements there may be
// thousands) and the outcome is pending until then.
//
// A duplicate acknowledgement is checked the same way: the stream's
// Nats-Msg-Id window spans every store, so another store that published
// this key as its message id first gets this publish answered "duplicate"
// with nothing stored (docs/security.md).
func (st *settler) judge(ctx context.Context, r *queue.Record, ack *jetstream.PubAck, err error) outcome {
	if err == nil && !ack.Duplicate {
		return outcome{rec: r, v: verdict{outcome: retry.Stored, kind: "stored"}, streamSeq: ack.Sequence}
	}
	var o outcome
	if err == nil {
		o = outcome{rec: r, v: verdict{outcome: retry.ItemTransient, kind: "transient:duplicate_ack"}, text: "central answered duplicate"}
	} else if o = (outcome{rec: r, v: classify(err), text: err.Error(), err: err}); !o.v.verify {
		return o
	}
	ch := make(chan outcome, 1)
	go func() {
		select {
		case st.verifies <- struct{}{}:
		case <-ctx.Done():
			ch <- outcome{rec: r, v: verdict{outcome: retry.Offline, kind: "offline"}, text: "shutting down"}
			return
		}
		defer func() { <-st.verifies }()
		ch <- st.verify(ctx, r, o)
	}()
	return outcome{rec: r, pending: ch}
}

// verify compares central's stored copy of r with r: the same digest is
// r's own earlier delivery, another digest a conflict.
func (st *settler) verify(ctx context.Context, r *queue.Record, o outcome) outcome {
	// The read-back ends with the connection, with the settler, or after
	// an attempt timeout, whichever comes first.
	rctx, cancel := context.WithTimeout(st.link.context(), st.o.AttemptTimeout)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	ctx = rctx
	digest, seq, err := st.link.transport().lastDigest(ctx, central.Subject(st.o.StoreID, r.KeyString()))
	switch {
	case err == nil && digest == hex.EncodeToString(r.Digest[:]):
		return outcome{rec: r, v: verdict{outcome: retry.AlreadyStored, kind: "already_stored"}, streamSeq: seq}
	case err == nil:
		return outcome{rec: r, v: verdict{outcome: retry.ItemPermanent, kind: "permanent:conflict"},
			text: fmt.Sprintf("central holds another movement under this key (stream sequence %d, different digest)", seq)}
	case errors.Is(err, errNotStored):
		return outcome{rec: r, v: verdict{outcome: retry.ItemTransient, kind: "transient:not_readable", answered: true}, text: "central reported the key stored but returned no message"}
	}
	v := classify(err)
	if v.outcome != retry.Offline && v.outcome != retry.Systemic {
		v = verdict{outcome: retry.ItemTransient, kind: "transient:verify"}
	}
	return outcome{rec: r, v: v, text: "reading central's copy: " + err.Error(), err: err}
}

// judgeBatch turns an atomic batch's result into outcomes for its members
// (see splitBatch).
func (st *settler) judgeBatch(ctx context.Context, f *flight, br batchResult) []outcome {
	outs := make([]outcome, len(f.items))
	if br.err == nil {
		first := br.lastSeq - uint64(len(f.items)) + 1
		for i, r := range f.items {
			outs[i] = outcome{rec: r, v: verdict{outcome: retry.Stored, kind: "stored"}, streamSeq: first + uint64(i)}
		}
		return outs
	}
	v := classify(br.err)
	text, cause := br.err.Error(), br.err
	if v.noBatch {
		st.notify(event{kind: evNoBatch})
	}
	step := splitBatch(v)
	if step == batchAsk {
		if err := st.alive(ctx); err != nil {
			step, v = batchPause, verdict{outcome: retry.Systemic, kind: "systemic:unresponsive"}
			text = fmt.Sprintf("an atomic batch of %d went unanswered (%s) and so did a probe (%s)", len(f.items), br.err, err)
			cause = err
		} else {
			step = batchSingly
		}
	}
	switch step {
	case batchSingly:
		st.log.Info("SYNC_BATCH_SINGLY", "movements", len(f.items), "reason", v.kind)
		return st.singly(ctx, f.items)
	case batchPause:
		for i, r := range f.items {
			outs[i] = outcome{rec: r, v: verdict{outcome: retry.Systemic, kind: v.kind}, text: text, err: cause}
		}
	default:
		for i, r := range f.items {
			outs[i] = outcome{rec: r, v: verdict{outcome: retry.Offline, kind: v.kind}, text: text, err: cause}
		}
	}
	return outs
}

// singly sends movements one by one (not as a batch), a window at a time,
// and judges each. Once one finds central unreachable the rest are not
// sent and share its outcome.
func (st *settler) singly(ctx context.Context, items []*queue.Record) []outcome {
	outs := make([]outcome, 0, len(items))
	for lo := 0; lo < len(items); lo += st.o.MaxInFlight {
		chunk := items[lo:min(lo+st.o.MaxInFlight, len(items))]
		futs := make([]future, len(chunk))
		errs := make([]error, len(chunk))
		for i, r := range chunk {
			futs[i], errs[i] = st.link.transport().publishAsync(message(st.o.StoreID, st.q.Lineage(), r, false))
		}
		var stop *outcome
		for i, r := range chunk {
			var ack *jetstream.PubAck
			err := errs[i]
			if err == nil {
				select {
				case ack = <-futs[i].Ok():
				case err = <-futs[i].Err():
				case <-ctx.Done():
					err = ctx.Err()
				}
			}
			o := st.judge(ctx, r, ack, err)
			outs = append(outs, o)
			if vo := o.v.outcome; o.pending == nil && (vo == retry.Offline || vo == retry.Systemic) && stop == nil {
				stop = &o
			}
		}
		if stop != nil {
			for _, r := range items[lo+len(chunk):] {
				outs = append(outs, outcome{rec: r, v: stop.v, text: stop.text, err: stop.err})
			}
			break
		}
	}
	return outs
}

// carry carries a ruling out: one transaction for the group, the
// connection snapshot, and a pause for the loop. outs are the group's
// outcomes, for the last error reported in the status document.
func (st *settler) carry(r ruling, outs []outcome) {
	var set queue.Settlement
	now := time.Now()
	set.Acks = make([]queue.Ack, 0, len(r.acks))
	debug := st.log.Enabled(context.Background(), slog.LevelDebug) // a line per movement: built only when logged
	for _, o := range r.acks {
		set.Acks = append(set.Acks, queue.Ack{Seq: o.rec.Seq, StreamSeq: o.streamSeq})
		if debug {
			st.log.Debug("SYNC_OK", "key", o.rec.KeyString(), "seq", o.rec.Seq, "stream_seq", o.streamSeq, "outcome", o.v.kind)
		}
	}
	for _, o := range r.quarantine {
		set.Quarantines = append(set.Quarantines, st.quarantineAt(o, o.v.kind))
	}
	for _, o := range r.charge {
		p := st.policy(o.rec.Class)
		attempts := o.rec.Attempts + 1
		if p.Exhausted(attempts) {
			set.Quarantines = append(set.Quarantines, st.quarantineAt(o, "exhausted:"+strings.TrimPrefix(o.v.kind, "transient:")))
			continue
		}
		d := p.Delay(o.rec.Attempts, st.o.Rand())
		set.Retries = append(set.Retries, queue.RetryAt{Seq: o.rec.Seq, Delay: d, Failure: queue.Failure{Kind: o.v.kind, Text: o.text}})
		st.log.Warn("SYNC_RETRY", "key", o.rec.KeyString(), "attempt", attempts, "next_delay", d.String(), "reason", o.v.kind)
	}
	for _, o := range r.soon {
		set.Retries = append(set.Retries, queue.RetryAt{Seq: o.rec.Seq, Uncharged: true,
			Failure: queue.Failure{Kind: o.v.kind, Text: o.text},
			Delay:   time.Duration((0.5 + st.o.Rand()) * float64(time.Second))})
	}
	set.Release = append(set.Release, seqs(r.release)...)
	pause := r.pause
	if err := st.commit(set, len(r.acks)); err != nil {
		pause = "local:store_error: " + err.Error()
	}
	lastErrKind := ""
	for _, o := range outs {
		if o.v.outcome != retry.Stored && o.v.outcome != retry.AlreadyStored {
			lastErrKind = o.v.kind
		}
	}
	st.link.settled(now, len(r.acks), lastErrKind)
	if pause != "" {
		cause := r.cause
		if pause != r.pause {
			cause = nil // the data file failed, not central
		}
		st.notify(event{kind: evSystemic, reason: pause, seqs: r.suspects, cause: cause})
	}
}

// commit applies a settlement in one transaction. When that fails nothing
// of it was recorded, and every movement is given back: what central stored
// is recognised on the next attempt (same key).
func (st *settler) commit(set queue.Settlement, synced int) error {
	if err := st.q.Settle(set); err != nil {
		seqs := set.Seqs()
		st.q.Release(seqs...)
		st.log.Error("QUEUE_ERROR", "error", err.Error(), "movements", len(seqs))
		return err
	}
	st.logSettlement(set, synced)
	return nil
}

func (st *settler) quarantineAt(o outcome, reason string) queue.QuarantineAt {
	st.log.Warn("SYNC_QUARANTINED", "key", o.rec.KeyString(), "seq", o.rec.Seq, "reason", reason, "attempts", o.rec.Attempts+1)
	return queue.QuarantineAt{
		Seq: o.rec.Seq, Reason: reason, Charge: true,
		Failure:   queue.Failure{Kind: o.v.kind, Text: o.text},
		ConnState: stateName(st.link.state.Load()), AgentVersion: st.o.AgentVersion,
	}
}

func (st *settler) logSettlement(set queue.Settlement, synced int) {
	if synced > 0 {
		st.log.Info("SYNC_OK", "count", synced, "first_seq", set.Acks[0].Seq, "last_seq", set.Acks[len(set.Acks)-1].Seq)
	}
}

// outcomeLabel is the metrics label of an outcome: its kind without any
// detail.
func outcomeLabel(v verdict) string {
	if v.outcome == retry.Stored {
		return "stored"
	}
	return v.kind
}

// policy is the retry policy of a class.
func (st *settler) policy(c movement.Class) retry.Policy {
	if c == movement.Controlled {
		return st.o.Controlled
	}
	return st.o.Ordinary
}

// and is r with the ruling u after it.
func (r ruling) and(u ruling) ruling {
	r.acks = append(r.acks, u.acks...)
	r.quarantine = append(r.quarantine, u.quarantine...)
	r.charge = append(r.charge, u.charge...)
	r.soon = append(r.soon, u.soon...)
	r.release = append(r.release, u.release...)
	if u.pause != "" {
		r.pause, r.cause = u.pause, u.cause
	}
	r.suspects = append(r.suspects, u.suspects...)
	r.ask = u.ask
	r.probe = r.probe || u.probe
	r.probeOK = r.probeOK || u.probeOK
	return r
}
