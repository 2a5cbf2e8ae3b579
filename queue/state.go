package queue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

// Lease returns up to max pending movements that are due at now, in due
// order (FIFO among movements due at the same time), and marks them leased
// so that later calls do not return them again until they are released by
// Settle or Release. Leases live in memory only.
//
// A due time more than MaxAhead (plus the window of a spread redrive under
// way) after now cannot have been scheduled by this clock: the wall clock
// jumped backwards. Such movements are treated as due, so a clock change
// never freezes retries.
func (q *Queue) Lease(now time.Time, max int) ([]*Record, error) {
	q.leaseMu.Lock()
	defer q.leaseMu.Unlock()
	ahead := q.opts.MaxAhead
	if now.Before(q.spread.until) {
		ahead += q.spread.length
	}
	farAhead := now.Add(ahead)
	var out []*Record
	err := q.db.View(func(tx *bolt.Tx) error {
		// Due order is mostly sequence order: the cursor steps to the
		// next record where it can and seeks where it must.
		pc := tx.Bucket(bucketPending).Cursor()
		var at uint64 // pc is at sequence at, when at > 0
		var kb [8]byte
		take := func(seq uint64) error {
			if _, ok := q.leased[seq]; ok || q.held(seq) {
				return nil
			}
			binary.BigEndian.PutUint64(kb[:], seq)
			var ck, v []byte
			if at > 0 && seq == at+1 {
				ck, v = pc.Next()
			} else {
				ck, v = pc.Seek(kb[:])
			}
			at = 0
			if len(ck) == 8 {
				at = binary.BigEndian.Uint64(ck)
			}
			if at != seq {
				return errors.New("queue: due index names a missing pending record")
			}
			r, err := unmarshalRecord(kb[:], v)
			if err != nil {
				return err
			}
			out = append(out, r)
			return nil
		}
		c := tx.Bucket(bucketDue).Cursor()
		for k, _ := c.First(); k != nil && len(out) < max; k, _ = c.Next() {
			t, seq := parseDueKey(k)
			if t.After(now) {
				break
			}
			if err := take(seq); err != nil {
				return err
			}
		}
		for k, _ := c.Last(); k != nil && len(out) < max; k, _ = c.Prev() {
			t, seq := parseDueKey(k)
			if !t.After(farAhead) {
				break
			}
			if err := take(seq); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, r := range out {
		q.leased[r.Seq] = lease{nextAt: r.NextAt, key: r.Key, digest: r.Digest, class: r.Class}
	}
	return out, nil
}

// NextDue is the earliest due time of a pending movement that is not
// leased, or the zero time when there is none. A due time that Lease would
// pull in (see Lease) is reported as now.
func (q *Queue) NextDue(now time.Time) (time.Time, error) {
	q.leaseMu.Lock()
	defer q.leaseMu.Unlock()
	var next time.Time
	err := q.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketDue).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			t, seq := parseDueKey(k)
			if _, ok := q.leased[seq]; ok || q.held(seq) {
				continue
			}
			next = t
			break
		}
		return nil
	})
	ahead := q.opts.MaxAhead
	if now.Before(q.spread.until) {
		ahead += q.spread.length
	}
	if next.After(now.Add(ahead)) {
		next = now
	}
	return next, err
}

// DueCount counts the pending movements due at now that are not leased,
// stopping at max: the sender asks "is a backlog due?" without reading it.
func (q *Queue) DueCount(now time.Time, max int) (int, error) {
	q.leaseMu.Lock()
	defer q.leaseMu.Unlock()
	n := 0
	err := q.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketDue).Cursor()
		for k, _ := c.First(); k != nil && n < max; k, _ = c.Next() {
			t, seq := parseDueKey(k)
			if t.After(now) {
				break
			}
			if _, ok := q.leased[seq]; !ok && !q.held(seq) {
				n++
			}
		}
		return nil
	})
	return n, err
}

// Leased is the number of movements currently leased.
func (q *Queue) Leased() int {
	q.leaseMu.Lock()
	defer q.leaseMu.Unlock()
	return len(q.leased)
}

// Release gives leased movements back unchanged: they are due again at
// their existing due time. Nothing is written; no attempt is charged.
func (q *Queue) Release(seqs ...uint64) {
	q.leaseMu.Lock()
	defer q.leaseMu.Unlock()
	for _, s := range seqs {
		delete(q.leased, s)
	}
}

func (q *Queue) releaseAfter(seqs []uint64) func() {
	return func() { q.Release(seqs...) }
}

// lease is what the queue keeps in memory of a leased movement: what its
// settlement needs, so that acknowledging it reads nothing back.
type lease struct {
	nextAt time.Time
	key    [16]byte
	digest [32]byte
	class  movement.Class
}

// leases copies the leases of acks.
func (q *Queue) leases(acks []Ack) map[uint64]lease {
	if len(acks) == 0 {
		return nil
	}
	q.leaseMu.Lock()
	defer q.leaseMu.Unlock()
	m := make(map[uint64]lease, len(acks))
	for _, a := range acks {
		if l, ok := q.leased[a.Seq]; ok {
			m[a.Seq] = l
		}
	}
	return m
}

// Ack says that central stored a movement.
type Ack struct {
	Seq       uint64
	StreamSeq uint64 // the central stream sequence of the stored message
}

// markSynced moves acknowledged movements from the pending bucket to the
// synced bucket. Both are keyed by sequence, and a settlement names the
// sequences a lease gave in due order, so its writes are close together
// and in order; the keys bucket is not touched (a pending key's entry
// names its sequence, which is where the synced state is found). What
// the entry needs is taken from the lease; a sequence settled without
// one is read back.
func (q *Queue) markSynced(tx *bolt.Tx, now time.Time, acks []Ack, leased map[uint64]lease) error {
	if len(acks) == 0 {
		return nil
	}
	b := buckets(tx)
	var moved [2]int64
	entries := make([]syncedEntry, 0, len(acks))
	// One cursor a bucket, each entry found once: a settlement's writes
	// are the bulk of a drain's work in the data file.
	pc, dc := b.pending.Cursor(), b.due.Cursor()
	var k [8]byte
	var dk [16]byte
	for _, a := range acks {
		binary.BigEndian.PutUint64(k[:], a.Seq)
		l, ok := leased[a.Seq]
		pendingAt := false // pc is at the pending record
		if ok {
			putDueKey(&dk, l.nextAt, a.Seq)
			_, ok = seekExact(dc, dk[:])
		}
		if !ok {
			// Not leased, or rescheduled since: the record says.
			v, found := seekExact(pc, k[:])
			if !found {
				continue // no longer pending
			}
			r, err := unmarshalRecord(k[:], v)
			if err != nil {
				return err
			}
			l = lease{nextAt: r.NextAt, key: r.Key, digest: r.Digest, class: r.Class}
			putDueKey(&dk, r.NextAt, a.Seq)
			_, ok = seekExact(dc, dk[:])
			pendingAt = true
		} else {
			_, pendingAt = seekExact(pc, k[:])
		}
		if ok {
			if err := dc.Delete(); err != nil {
				return err
			}
		}
		if pendingAt {
			if err := pc.Delete(); err != nil {
				return err
			}
		}
		entries = append(entries, syncedEntry{Seq: a.Seq, Key: l.key, Digest: l.digest, Class: l.class, StreamSeq: a.StreamSeq, At: now})
		moved[l.class]++
	}
	if err := b.putSynced(entries); err != nil {
		return err
	}
	var total int64
	for c, n := range moved {
		if n == 0 {
			continue
		}
		total += n
		if err := b.count(Pending, movement.Class(c), -n); err != nil {
			return err
		}
		if err := b.count(Synced, movement.Class(c), n); err != nil {
			return err
		}
	}
	if total == 0 {
		return nil
	}
	if err := b.meta.Put(metaLastSynced, u64(uint64(now.UnixNano()))); err != nil {
		return err
	}
	return addU64(b.meta, metaSyncedTotal, total)
}

// Settlement is the outcome of a group of delivery attempts, applied in one
// transaction: acknowledged movements become synced, failed ones are
// scheduled again or quarantined. Every sequence named is released from its
// lease once the transaction committed; Release names leased movements to
// give back unchanged. A synced movement's payload is dropped and its key
// kept, with its central sequence, for the dedupe horizon; a retry is
// charged as an attempt unless Uncharged; a quarantine is journalled.
// Sequences that are no longer pending are skipped.
type Settlement struct {
	Acks        []Ack
	Retries     []RetryAt
	Quarantines []QuarantineAt
	Release     []uint64
}

// Seqs lists every sequence the settlement names: acknowledged, retried,
// quarantined and released, in that order.
func (st Settlement) Seqs() []uint64 {
	seqs := make([]uint64, 0, len(st.Acks)+len(st.Retries)+len(st.Quarantines)+len(st.Release))
	for _, a := range st.Acks {
		seqs = append(seqs, a.Seq)
	}
	for _, r := range st.Retries {
		seqs = append(seqs, r.Seq)
	}
	for _, x := range st.Quarantines {
		seqs = append(seqs, x.Seq)
	}
	return append(seqs, st.Release...)
}

// Settle applies a settlement in one transaction (one fsync).
func (q *Queue) Settle(st Settlement) error {
	seqs := st.Seqs()
	if len(st.Acks)+len(st.Retries)+len(st.Quarantines) == 0 {
		q.Release(seqs...)
		return nil
	}
	leased := q.leases(st.Acks)
	return q.do(&op{
		apply: func(tx *bolt.Tx) error {
			now := q.opts.Clock()
			if err := q.markSynced(tx, now, st.Acks, leased); err != nil {
				return err
			}
			if err := q.retry(tx, now, st.Retries); err != nil {
				return err
			}
			return q.quarantine(tx, now, st.Quarantines)
		},
		after: q.releaseAfter(seqs),
	})
}

// Failure is one movement-specific failed attempt.
type Failure struct {
	Kind string // the outcome kind, e.g. "transient:timeout" or "permanent:too_large"
	Text string // the error text; never payload data
}

// RetryAt schedules the next attempt of a leased movement.
type RetryAt struct {
	Seq     uint64
	Failure Failure
	Delay   time.Duration // the delay chosen; the movement is due at now+Delay
	// Uncharged reschedules without counting an attempt (a failure that is
	// not the movement's fault, e.g. central still replicating its id).
	Uncharged bool
}

func (q *Queue) retry(tx *bolt.Tx, now time.Time, retries []RetryAt) error {
	b := buckets(tx)
	for _, rt := range retries {
		v := b.pending.Get(u64(rt.Seq))
		if v == nil {
			continue
		}
		r, err := unmarshalRecord(u64(rt.Seq), v)
		if err != nil {
			return err
		}
		if err := b.due.Delete(dueKey(r.NextAt, r.Seq)); err != nil {
			return err
		}
		if rt.Uncharged {
			r.LastErrKind, r.LastErrText = rt.Failure.Kind, rt.Failure.Text
		} else {
			r.recordFailure(now, rt.Failure, rt.Delay)
		}
		r.NextAt = now.Add(rt.Delay)
		if err := b.due.Put(dueKey(r.NextAt, r.Seq), nil); err != nil {
			return err
		}
		if err := b.pending.Put(u64(r.Seq), r.marshal(false)); err != nil {
			return err
		}
	}
	return nil
}

func (r *Record) recordFailure(now time.Time, f Failure, delay time.Duration) {
	r.Attempts++
	if r.FirstFailure.IsZero() {
		r.FirstFailure = now
	}
	r.LastFailure = now
	r.LastErrKind = f.Kind
	r.LastErrText = f.Text
	if delay > 0 {
		if len(r.Delays) == maxDelaysKept {
			r.Delays = r.Delays[1:]
		}
		r.Delays = append(r.Delays, delay)
	}
}

// QuarantineAt moves one leased movement to the quarantine.
type QuarantineAt struct {
	Seq          uint64
	Failure      Failure // the failure that decided it
	Reason       string  // "permanent:<kind>" or "exhausted:<kind>"
	Charge       bool    // whether this failure is an attempt (false when already charged)
	ConnState    string
	AgentVersion string
}

func (q *Queue) quarantine(tx *bolt.Tx, now time.Time, items []QuarantineAt) error {
	if len(items) == 0 {
		return nil
	}
	b := buckets(tx)
	byReason := make(map[string][]string)
	var order []string
	var moved int64
	for _, it := range items {
		r, err := b.takePending(it.Seq)
		if err != nil {
			return err
		}
		if r == nil {
			continue
		}
		if it.Charge {
			r.recordFailure(now, it.Failure, 0)
		} else {
			r.LastFailure, r.LastErrKind, r.LastErrText = now, it.Failure.Kind, it.Failure.Text
			if r.FirstFailure.IsZero() {
				r.FirstFailure = now
			}
		}
		r.NextAt = time.Time{}
		r.Quarantine = &QuarantineInfo{At: now, Reason: it.Reason, ConnState: it.ConnState, AgentVersion: it.AgentVersion}
		if err := b.quarantine.Put(r.Key[:], r.marshal(true)); err != nil {
			return err
		}
		if err := b.setState(r, Pending, Quarantined, now); err != nil {
			return err
		}
		if byReason[it.Reason] == nil {
			order = append(order, it.Reason)
		}
		byReason[it.Reason] = append(byReason[it.Reason], r.KeyString())
		moved++
	}
	if err := addU64(b.meta, metaQuarTotal, moved); err != nil {
		return err
	}
	for _, reason := range order {
		ev := Event{At: now, Action: ActionQuarantine, Actor: ActorAgent, Reason: reason, Keys: byReason[reason]}
		if err := appendEvents(tx, ev); err != nil {
			return err
		}
	}
	return nil
}

// Redrive is an operator's request to send quarantined movements again.
type Redrive struct {
	Keys   [][16]byte
	Actor  string // who asked, e.g. "local:alice" or "remote:<operator key>"
	Reason string // why; required
	// Spread gives each movement a due time uniform over [now, now+Spread)
	// so that a large redrive does not stampede central. Rand returns a
	// number in [0, 1); it is required when Spread > 0.
	Spread time.Duration
	Rand   func() float64
	// Detail is recorded in the journal with the event.
	Detail map[string]string
}

// Redriven is one movement put back to pending.
type Redriven struct {
	Key   [16]byte
	DueAt time.Time
}

// RedriveResult says what a redrive did.
type RedriveResult struct {
	Redriven []Redriven
	NotFound [][16]byte // not quarantined (never, no longer, or purged)
}

// ErrNoReason is returned by operator actions given no reason.
var ErrNoReason = errors.New("queue: a reason is required for operator actions")

// Redrive moves quarantined movements back to pending with their attempts
// reset, and journals who did it and why — one transaction.
func (q *Queue) Redrive(rq Redrive) (RedriveResult, error) {
	var res RedriveResult
	if rq.Reason == "" {
		return res, ErrNoReason
	}
	if rq.Spread > 0 && rq.Rand == nil {
		return res, errors.New("queue: redrive: spread needs a random source")
	}
	var window spreadWindow
	err := q.do(&op{apply: func(tx *bolt.Tx) error {
		now := q.opts.Clock()
		res, window = RedriveResult{}, spreadWindow{}
		b := buckets(tx)
		keys, err := b.takeEachQuarantined(rq.Keys, &res.NotFound, func(k [16]byte, r *Record) error {
			r.Quarantine = nil
			r.Attempts = 0
			r.FirstFailure, r.LastFailure = time.Time{}, time.Time{}
			r.LastErrKind, r.LastErrText, r.Delays = "", "", nil
			r.NextAt = now
			if rq.Spread > 0 {
				r.NextAt = now.Add(time.Duration(rq.Rand() * float64(rq.Spread)))
			}
			if err := b.pending.Put(u64(r.Seq), r.marshal(false)); err != nil {
				return err
			}
			if err := b.due.Put(dueKey(r.NextAt, r.Seq), nil); err != nil {
				return err
			}
			if err := b.setState(r, Quarantined, Pending, now); err != nil {
				return err
			}
			res.Redriven = append(res.Redriven, Redriven{Key: k, DueAt: r.NextAt})
			return nil
		})
		if err != nil || len(keys) == 0 {
			return err
		}
		if rq.Spread > 0 {
			window = spreadWindow{until: now.Add(rq.Spread), length: rq.Spread}
			if window.until.Before(q.currentSpread().until) {
				window = q.currentSpread()
			}
			if err := b.meta.Put(metaSpreadUntil, u64(uint64(window.until.UnixNano()))); err != nil {
				return err
			}
			if err := b.meta.Put(metaSpreadLength, u64(uint64(window.length))); err != nil {
				return err
			}
		}
		ev := Event{At: now, Action: ActionRedrive, Actor: rq.Actor, Reason: rq.Reason, Keys: keys, Detail: rq.Detail}
		return appendEvents(tx, ev)
	}, after: func() {
		if window.length > 0 {
			q.leaseMu.Lock()
			q.spread = window
			q.leaseMu.Unlock()
		}
		if len(res.Redriven) > 0 {
			q.notify()
		}
	}})
	return res, err
}

func (q *Queue) currentSpread() spreadWindow {
	q.leaseMu.Lock()
	defer q.leaseMu.Unlock()
	return q.spread
}

// Purge is an operator's request to drop quarantined movements for good.
type Purge struct {
	Keys   [][16]byte
	Actor  string
	Reason string // required
	Detail map[string]string
}

// PurgeResult says what a purge did.
type PurgeResult struct {
	Purged   [][16]byte
	NotFound [][16]byte
}

// Purge removes quarantined movements and marks their keys purged, so the
// same movement can never come back (not by redrive, not by submitting it
// again), and journals it — one transaction. Callers export the movements
// first (see package dlq).
func (q *Queue) Purge(rq Purge) (PurgeResult, error) {
	var res PurgeResult
	if rq.Reason == "" {
		return res, ErrNoReason
	}
	err := q.do(&op{apply: func(tx *bolt.Tx) error {
		now := q.opts.Clock()
		res = PurgeResult{}
		b := buckets(tx)
		keys, err := b.takeEachQuarantined(rq.Keys, &res.NotFound, func(k [16]byte, r *Record) error {
			if err := b.setState(r, Quarantined, Purged, now); err != nil {
				return err
			}
			res.Purged = append(res.Purged, k)
			return nil
		})
		if err != nil || len(keys) == 0 {
			return err
		}
		ev := Event{At: now, Action: ActionPurge, Actor: rq.Actor, Reason: rq.Reason, Keys: keys, Detail: rq.Detail}
		return appendEvents(tx, ev)
	}})
	return res, err
}

// txBuckets are the buckets of one transaction.
type txBuckets struct {
	meta, pending, due, synced, quarantine *bolt.Bucket
	keys                                   keyIndex
}

func buckets(tx *bolt.Tx) txBuckets {
	return txBuckets{
		meta:       tx.Bucket(bucketMeta),
		pending:    tx.Bucket(bucketPending),
		due:        tx.Bucket(bucketDue),
		keys:       keyIndex{bk: tx.Bucket(bucketKeys), secret: tx.Bucket(bucketMeta).Get(metaKeySecret)},
		synced:     tx.Bucket(bucketSynced),
		quarantine: tx.Bucket(bucketQuarantine),
	}
}

// seekExact moves c to key and returns its value and whether key is there.
func seekExact(c *bolt.Cursor, key []byte) ([]byte, bool) {
	k, v := c.Seek(key)
	return v, bytes.Equal(k, key)
}

// takePending deletes a pending record and its due entry and returns it,
// or nil when seq is not pending.
func (b txBuckets) takePending(seq uint64) (*Record, error) {
	k := u64(seq)
	v := b.pending.Get(k)
	if v == nil {
		return nil, nil
	}
	r, err := unmarshalRecord(k, v)
	if err != nil {
		return nil, err
	}
	if err := b.due.Delete(dueKey(r.NextAt, r.Seq)); err != nil {
		return nil, err
	}
	return r, b.pending.Delete(k)
}

// takeEachQuarantined takes each key's movement out of the quarantine and
// hands it to fn; keys not quarantined are added to notFound. It returns
// the keys taken, as strings, for the journal.
func (b txBuckets) takeEachQuarantined(keys [][16]byte, notFound *[][16]byte, fn func(k [16]byte, r *Record) error) ([]string, error) {
	var taken []string
	for _, k := range keys {
		r, err := b.takeQuarantined(k)
		if err != nil {
			return nil, err
		}
		if r == nil {
			*notFound = append(*notFound, k)
			continue
		}
		if err := fn(k, r); err != nil {
			return nil, err
		}
		taken = append(taken, r.KeyString())
	}
	return taken, nil
}

// takeQuarantined deletes a quarantined record and returns it, or nil when
// key is not quarantined.
func (b txBuckets) takeQuarantined(key [16]byte) (*Record, error) {
	v := b.quarantine.Get(key[:])
	if v == nil {
		return nil, nil
	}
	r, err := unmarshalRecord(key[:], v)
	if err != nil {
		return nil, err
	}
	return r, b.quarantine.Delete(key[:])
}

// setState moves r's key from state from to state to, writing its entry
// in the long form, and adjusts the counters.
func (b txBuckets) setState(r *Record, from, to State, now time.Time) error {
	if v, err := b.keys.Get(r.Key[:]); err != nil {
		return err
	} else if v == nil {
		return errors.New("queue: key record missing for a held movement")
	}
	if err := b.count(from, r.Class, -1); err != nil {
		return err
	}
	if err := b.count(to, r.Class, 1); err != nil {
		return err
	}
	e := keyEntry{Long: true, State: to, Class: r.Class, Seq: r.Seq, At: now, Digest: r.Digest}
	return b.keys.Put(r.Key[:], e.marshal())
}

func (b txBuckets) count(s State, c movement.Class, delta int64) error {
	return addU64(b.meta, counterKey(s, c), delta)
}

// lookup says what the file holds for key: its entry, resolved against
// the bucket that holds its state, with the record when withRecord and
// the key is pending or quarantined. It returns ErrNotFound for a key the
// file does not hold.
func (b txBuckets) lookup(key []byte, withRecord bool) (Entry, error) {
	v, err := b.keys.Get(key)
	if err != nil {
		return Entry{}, err
	}
	if v == nil {
		return Entry{}, ErrNotFound
	}
	e, err := unmarshalKeyEntry(v)
	if err != nil {
		return Entry{}, fmt.Errorf("queue: key %x: %w", key, err)
	}
	return b.resolve(key, e, withRecord)
}

// resolve completes key's entry e from the bucket that holds its state.
func (b txBuckets) resolve(key []byte, e keyEntry, withRecord bool) (Entry, error) {
	out := Entry{Key: [16]byte(key), State: e.State, Class: e.Class, Seq: e.Seq, At: e.At, Digest: e.Digest}
	var rk, rv []byte
	switch {
	case e.Long && e.State == Purged:
		return out, nil
	case e.Long && e.State == Quarantined:
		rk, rv = key, b.quarantine.Get(key)
		if rv == nil {
			return out, fmt.Errorf("queue: quarantined key %x has no record", key)
		}
	default:
		sk := u64(e.Seq)
		if rv = b.pending.Get(sk); rv != nil {
			rk, out.State = sk, Pending
			break
		}
		se, ok, err := b.syncedGet(e.Seq)
		if err != nil {
			return out, err
		}
		if !ok {
			return out, fmt.Errorf("queue: key %x names sequence %d, which is neither pending nor synced", key, e.Seq)
		}
		if !bytes.Equal(se.Key[:], key) {
			return out, fmt.Errorf("queue: key %x names sequence %d, which is key %x's", key, e.Seq, se.Key)
		}
		out.State, out.Class, out.StreamSeq, out.At, out.Digest = Synced, se.Class, se.StreamSeq, se.At, se.Digest
		return out, nil
	}
	h, err := peekRecord(rv)
	if err != nil {
		return out, err
	}
	if !bytes.Equal(h.Key[:], key) {
		return out, fmt.Errorf("queue: key %x names the record of key %x", key, h.Key)
	}
	out.Class, out.Digest = h.Class, h.Digest
	if !e.Long {
		out.At = h.EnqueuedAt
	}
	if withRecord {
		if out.Record, err = unmarshalRecord(rk, rv); err != nil {
			return out, err
		}
	}
	return out, nil
}
