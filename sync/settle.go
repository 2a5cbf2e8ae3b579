package sync

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
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
	probe     bool
	// pending, when set, delivers the outcome once central's copy was read
	// back (see verify); the other fields are not yet meaningful.
	pending chan outcome
}

// maxVerifies bounds the read-backs in flight at once.
const maxVerifies = 64

// settler is the state of the settle goroutine.
type settler struct {
	*sender
	held        []outcome // transient failures awaiting evidence
	consecutive int       // transient failures in a row, each a different movement
	verifies    chan struct{}
}

// settle waits for the flights in send order, judges their outcomes and
// commits them in groups. It ends when the flights channel is closed and
// drained, or when ctx ends (abandoning what is still in the air).
func (s *sender) settle(ctx context.Context) {
	st := &settler{sender: s, verifies: make(chan struct{}, maxVerifies)}
	var next *flight
	for {
		f := next
		next = nil
		if f == nil {
			var ok bool
			f, ok = st.take(ctx)
			if !ok {
				st.releaseHeld()
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
			case g, open := <-s.flights:
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
		probe, probeOK := st.apply(outs)
		s.notify(event{kind: evSettled, singles: singles, batches: batches, probe: probe, ok: probeOK, seqs: probeSeq})
	}
}

// take waits for the next flight. While failures are held for evidence and
// nothing more is sent for an attempt timeout, the evidence will not come.
// If central answered each of them (an error about that movement), central
// is alive and the failures are the movements' own: they are charged. If
// some went unanswered, everything sent recently failed, which is
// central's problem: the sender pauses, charging nothing, and will not
// probe with those movements while others are due.
func (st *settler) take(ctx context.Context) (*flight, bool) {
	if len(st.held) == 0 {
		select {
		case f, ok := <-st.flights:
			return f, ok
		case <-ctx.Done():
			return nil, false
		}
	}
	t := time.NewTimer(st.o.AttemptTimeout)
	defer t.Stop()
	select {
	case f, ok := <-st.flights:
		return f, ok
	case <-ctx.Done():
		return nil, false
	case <-t.C:
		answered := true
		for _, h := range st.held {
			answered = answered && h.v.answered
		}
		if answered {
			var set queue.Settlement
			st.chargeHeld(&set)
			if err := st.commit(set, 0); err != nil {
				st.notify(event{kind: evSystemic, reason: "local:store_error: " + err.Error()})
			}
			return st.take(ctx)
		}
		reason := fmt.Sprintf("systemic:unresponsive: %d movement(s) failed and none succeeded since (last: %s)", len(st.held), st.held[len(st.held)-1].v.kind)
		suspects := st.heldSeqs()
		st.releaseHeld()
		st.consecutive = 0
		st.notify(event{kind: evSystemic, reason: reason, seqs: suspects})
		return st.take(ctx)
	}
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
		return st.judgeBatch(ctx, f, br), true
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
// with nothing stored (README, Security).
func (st *settler) judge(ctx context.Context, r *queue.Record, ack *jetstream.PubAck, err error) outcome {
	if err == nil && !ack.Duplicate {
		return outcome{rec: r, v: verdict{outcome: retry.Stored, kind: "stored"}, streamSeq: ack.Sequence}
	}
	var o outcome
	if err == nil {
		o = outcome{rec: r, v: verdict{outcome: retry.ItemTransient, kind: "transient:duplicate_ack"}, text: "central answered duplicate"}
	} else if o = (outcome{rec: r, v: classify(err), text: err.Error()}); !o.v.verify {
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
	rctx, cancel := context.WithTimeout(st.link(), st.o.AttemptTimeout)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	ctx = rctx
	digest, seq, err := st.transport().lastDigest(ctx, central.Subject(st.o.StoreID, r.KeyString()))
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
	return outcome{rec: r, v: v, text: "reading central's copy: " + err.Error()}
}

// judgeBatch turns an atomic batch's result into outcomes for its members.
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
	if v.noBatch {
		st.notify(event{kind: evNoBatch})
	}
	if v.singly || v.verify || v.outcome == retry.ItemPermanent {
		// Some member is already stored (or too large) and the server does
		// not say which: send them one at a time.
		st.log.Info("SYNC_BATCH_SINGLY", "movements", len(f.items), "reason", v.kind)
		return st.singly(ctx, f.items)
	}
	// The whole batch failed for a reason that is not any member's: it is
	// one failure, not len(items). Members go back unchanged.
	for i, r := range f.items {
		outs[i] = outcome{rec: r, v: verdict{outcome: retry.Offline, kind: v.kind}, text: br.err.Error()}
	}
	if v.outcome == retry.Systemic {
		for i := range outs {
			outs[i].v.outcome = retry.Systemic
		}
	} else if v.outcome == retry.ItemTransient && !v.noBatch && st.state.Load() == stOnline {
		st.consecutive++
		if st.consecutive >= st.o.SystemicAfter {
			st.consecutive = 0
			st.releaseHeld()
			st.notify(event{kind: evSystemic, reason: fmt.Sprintf("systemic:consecutive_failures: %d failures in a row (last: %s)", st.o.SystemicAfter, v.kind)})
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
			futs[i], errs[i] = st.transport().publishAsync(message(st.o.StoreID, r))
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
				outs = append(outs, outcome{rec: r, v: stop.v, text: stop.text})
			}
			break
		}
	}
	return outs
}

// apply charges, schedules and commits the outcomes of a group in one
// transaction. It reports whether a probe was among them and whether it
// reached central.
func (st *settler) apply(outs []outcome) (probe, probeOK bool) {
	for i := range outs {
		if outs[i].pending != nil {
			p := outs[i].probe
			outs[i] = <-outs[i].pending
			outs[i].probe = p
		}
		if outs[i].probe {
			// The probe reached central if central stored it or answered
			// about it.
			probe = true
			switch v := outs[i].v; v.outcome {
			case retry.Stored, retry.AlreadyStored, retry.ItemPermanent:
				probeOK = true
			case retry.ItemTransient:
				probeOK = v.answered
			}
		}
	}
	var set queue.Settlement
	var systemic string
	state := st.state.Load()
	now := time.Now()
	var synced, lastErrKind = 0, ""
	for _, o := range outs {
		st.m.Outcome(outcomeLabel(o.v), 1)
		switch o.v.outcome {
		case retry.Stored, retry.AlreadyStored:
			set.Acks = append(set.Acks, queue.Ack{Seq: o.rec.Seq, StreamSeq: o.streamSeq})
			synced++
			st.log.Debug("SYNC_OK", "key", o.rec.KeyString(), "seq", o.rec.Seq, "stream_seq", o.streamSeq, "outcome", o.v.kind)
			// Central works: what failed before this was the movements' own.
			st.chargeHeld(&set)
			st.consecutive = 0
		case retry.ItemPermanent:
			lastErrKind = o.v.kind
			set.Quarantines = append(set.Quarantines, st.quarantineAt(o, o.v.kind, true))
		case retry.ItemTransient:
			lastErrKind = o.v.kind
			switch {
			case o.v.soon:
				set.Retries = append(set.Retries, queue.RetryAt{Seq: o.rec.Seq, Uncharged: true,
					Failure: queue.Failure{Kind: o.v.kind, Text: o.text},
					Delay:   time.Duration((0.5 + st.o.Rand()) * float64(time.Second))})
			case state != stOnline || o.probe:
				set.Release = append(set.Release, o.rec.Seq)
			default:
				st.held = append(st.held, o)
				st.consecutive++
				if st.consecutive >= st.o.SystemicAfter {
					systemic = fmt.Sprintf("systemic:consecutive_failures: %d movements failed in a row (last: %s)", st.consecutive, o.v.kind)
					st.consecutive = 0
					set.Release = append(set.Release, st.heldSeqs()...)
					st.held = nil
				}
			}
		case retry.Systemic:
			lastErrKind = o.v.kind
			systemic = o.v.kind
			if o.text != "" {
				systemic += ": " + o.text
			}
			set.Release = append(set.Release, o.rec.Seq)
			set.Release = append(set.Release, st.heldSeqs()...)
			st.held = nil
			st.consecutive = 0
		default: // Offline: not the movement's fault, nothing charged.
			set.Release = append(set.Release, o.rec.Seq)
		}
	}
	if err := st.commit(set, synced); err != nil {
		systemic = "local:store_error: " + err.Error()
	}
	st.mu.Lock()
	if synced > 0 {
		t := now.UTC()
		st.snap.LastSyncAt = &t
	}
	if lastErrKind != "" {
		t := now.UTC()
		st.snap.LastErrorKind, st.snap.LastErrorAt = lastErrKind, &t
	}
	st.mu.Unlock()
	if systemic != "" {
		st.notify(event{kind: evSystemic, reason: systemic})
	}
	return probe, probeOK
}

// commit applies a settlement in one transaction. When that fails nothing
// of it was recorded, and every movement is given back: what central stored
// is recognised on the next attempt (same key).
func (st *settler) commit(set queue.Settlement, synced int) error {
	if err := st.q.Settle(set); err != nil {
		st.q.Release(allSeqs(set)...)
		st.log.Error("QUEUE_ERROR", "error", err.Error(), "movements", len(allSeqs(set)))
		return err
	}
	st.logSettlement(set, synced)
	return nil
}

// chargeHeld charges the held failures: each is an attempt; a movement out
// of attempts is quarantined, the others wait their full-jitter delay.
func (st *settler) chargeHeld(set *queue.Settlement) {
	for _, h := range st.held {
		p := st.policy(h.rec.Class)
		attempts := h.rec.Attempts + 1
		if p.Exhausted(attempts) {
			set.Quarantines = append(set.Quarantines, st.quarantineAt(h, "exhausted:"+strings.TrimPrefix(h.v.kind, "transient:"), true))
			continue
		}
		d := p.Delay(h.rec.Attempts, st.o.Rand())
		set.Retries = append(set.Retries, queue.RetryAt{Seq: h.rec.Seq, Delay: d, Failure: queue.Failure{Kind: h.v.kind, Text: h.text}})
		st.log.Warn("SYNC_RETRY", "key", h.rec.KeyString(), "attempt", attempts, "next_delay", d.String(), "reason", h.v.kind)
	}
	st.held = nil
}

func (st *settler) quarantineAt(o outcome, reason string, charge bool) queue.QuarantineAt {
	st.log.Warn("SYNC_QUARANTINED", "key", o.rec.KeyString(), "seq", o.rec.Seq, "reason", reason, "attempts", o.rec.Attempts+1)
	return queue.QuarantineAt{
		Seq: o.rec.Seq, Reason: reason, Charge: charge,
		Failure:   queue.Failure{Kind: o.v.kind, Text: o.text},
		ConnState: stateName(st.state.Load()), AgentVersion: st.o.AgentVersion,
	}
}

func (st *settler) heldSeqs() []uint64 {
	seqs := make([]uint64, len(st.held))
	for i, h := range st.held {
		seqs[i] = h.rec.Seq
	}
	return seqs
}

// releaseHeld gives the held movements back uncharged.
func (st *settler) releaseHeld() {
	st.q.Release(st.heldSeqs()...)
	st.held = nil
}

func (st *settler) logSettlement(set queue.Settlement, synced int) {
	if synced > 0 {
		st.log.Info("SYNC_OK", "count", synced, "first_seq", set.Acks[0].Seq, "last_seq", set.Acks[len(set.Acks)-1].Seq)
	}
}

func allSeqs(set queue.Settlement) []uint64 {
	var seqs []uint64
	for _, a := range set.Acks {
		seqs = append(seqs, a.Seq)
	}
	for _, r := range set.Retries {
		seqs = append(seqs, r.Seq)
	}
	for _, q := range set.Quarantines {
		seqs = append(seqs, q.Seq)
	}
	return append(seqs, set.Release...)
}

// outcomeLabel is the metrics label of an outcome: its kind without any
// detail.
func outcomeLabel(v verdict) string {
	if v.outcome == retry.Stored {
		return "stored"
	}
	return v.kind
}
