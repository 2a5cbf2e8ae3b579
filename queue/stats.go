package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

// Stats is the queue's state as kept in its counters. Reading it costs the
// same for ten movements as for ten million.
type Stats struct {
	StoreID       string
	Path          string
	SchemaVersion uint64
	// Counts[state][class]; state and class as in States and movement.Classes.
	Counts      map[State]map[movement.Class]uint64
	SyncedTotal uint64 // movements ever synced, including pruned keys
	// QuarantinedTotal counts every move to the quarantine, including
	// movements since redriven or purged.
	QuarantinedTotal uint64
	OldestPending    time.Time // enqueue time of the oldest pending movement; zero when none
	NextSeq          uint64    // the sequence the next new movement gets
	FileSize         int64
}

// Count is the number of keys in state s, all classes.
func (s Stats) Count(st State) uint64 {
	var n uint64
	for _, v := range s.Counts[st] {
		n += v
	}
	return n
}

// Stats reads the counters in one read transaction.
func (q *Queue) Stats() (Stats, error) {
	s := Stats{Path: q.opts.Path, Counts: make(map[State]map[movement.Class]uint64)}
	err := q.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		s.StoreID = string(meta.Get(metaStore))
		s.SchemaVersion = getU64(meta, metaSchema)
		for _, st := range States {
			s.Counts[st] = make(map[movement.Class]uint64)
			for _, c := range movement.Classes {
				s.Counts[st][c] = getU64(meta, counterKey(st, c))
			}
		}
		s.SyncedTotal = getU64(meta, metaSyncedTotal)
		s.QuarantinedTotal = getU64(meta, metaQuarTotal)
		s.NextSeq = getU64(meta, metaNextSeq) + 1
		if _, v := tx.Bucket(bucketPending).Cursor().First(); v != nil {
			h, err := peekRecord(v)
			if err != nil {
				return err
			}
			s.OldestPending = h.EnqueuedAt
		}
		s.FileSize = tx.Size()
		return nil
	})
	return s, err
}

// Entry is what the queue holds for one key.
type Entry struct {
	Key       [16]byte
	State     State
	Class     movement.Class
	Seq       uint64
	StreamSeq uint64    // central sequence, when synced
	At        time.Time // when the key entered its state
	Digest    [32]byte
	Record    *Record // the movement, when pending or quarantined
}

// Get returns what the queue holds for key, or ErrNotFound.
func (q *Queue) Get(key [16]byte) (Entry, error) {
	var e Entry
	err := q.db.View(func(tx *bolt.Tx) error {
		var err error
		e, err = buckets(tx).lookup(key[:], true)
		return err
	})
	return e, err
}

// ForEachQuarantined calls fn for every quarantined movement, in key order,
// until fn returns false.
func (q *Queue) ForEachQuarantined(fn func(*Record) bool) error {
	return q.forEach(bucketQuarantine, fn)
}

func (q *Queue) forEach(bucket []byte, fn func(*Record) bool) error {
	return q.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r, err := unmarshalRecord(k, v)
			if err != nil {
				return err
			}
			if !fn(r) {
				return nil
			}
		}
		return nil
	})
}

// Prune drops what is past its horizon: synced keys older than
// syncedHorizon and journal events older than journalRetention (a
// non-positive duration keeps everything). It removes at most limit items
// per call so a large prune does not hold one huge transaction; it returns
// how many it removed.
//
// Synced keys are kept by sequence, which follows the order they were
// acknowledged in closely but not exactly (a retried or redriven movement
// is acknowledged after later ones). Prune reads them from the lowest
// sequence, dropping each one past the horizon and passing over those
// that are not, and stops after passing over limit of them in one call:
// a synced key is never dropped before the horizon, and one acknowledged
// late holds back the pruning of the keys after it only while more than
// limit keys within the horizon lie between them.
func (q *Queue) Prune(syncedHorizon, journalRetention time.Duration, limit int) (int, error) {
	var n int
	err := q.do(&op{apply: func(tx *bolt.Tx) error {
		now := q.opts.Clock()
		n = 0
		if syncedHorizon > 0 {
			var err error
			if n, err = buckets(tx).pruneSynced(now.Add(-syncedHorizon), limit); err != nil {
				return err
			}
		}
		if journalRetention > 0 {
			dropped, err := pruneJournal(tx.Bucket(bucketJournal), now.Add(-journalRetention), limit-n)
			n += dropped
			return err
		}
		return nil
	}})
	return n, err
}

// pruneSynced drops synced keys acknowledged before cutoff, from the
// lowest sequence, until it has dropped or passed over limit of them (see
// Prune). It returns how many it dropped.
func (b txBuckets) pruneSynced(cutoff time.Time, limit int) (int, error) {
	type rewrite struct {
		k     []byte
		left  []syncedEntry
		drops []syncedEntry
	}
	var (
		rewrites []rewrite
		dropped  int
		passed   int
	)
	err := b.forEachSyncedBlock(func(k []byte, es []syncedEntry) (bool, error) {
		rw := rewrite{k: bytes.Clone(k)}
		for i, e := range es {
			if dropped >= limit || passed >= limit {
				rw.left = append(rw.left, es[i:]...)
				break
			}
			if e.At.Before(cutoff) {
				rw.drops = append(rw.drops, e)
				dropped++
			} else {
				rw.left = append(rw.left, e)
				passed++
			}
		}
		if len(rw.drops) > 0 {
			rewrites = append(rewrites, rw)
		}
		return dropped < limit && passed < limit, nil
	})
	if err != nil {
		return 0, err
	}
	for _, rw := range rewrites {
		for _, e := range rw.drops {
			if err := b.dropSynced(e); err != nil {
				return 0, err
			}
		}
		if err := b.replaceSyncedBlock(rw.k, rw.left); err != nil {
			return 0, err
		}
	}
	return dropped, nil
}

// dropSynced forgets one synced key: its entry in the keys bucket, unless
// the key was submitted again since (another sequence) or is a long-lived
// key that is not pending, and its count.
func (b txBuckets) dropSynced(e syncedEntry) error {
	v, err := b.keys.Get(e.Key[:])
	if err != nil {
		return err
	}
	if v != nil {
		ke, err := unmarshalKeyEntry(v)
		if err != nil {
			return err
		}
		if ke.Seq == e.Seq && (!ke.Long || ke.State == Pending) {
			if err := b.keys.Delete(e.Key[:]); err != nil {
				return err
			}
		}
	}
	return b.count(Synced, e.Class, -1)
}

// pruneJournal drops up to limit journal events older than cutoff, oldest
// first, and returns how many it dropped.
func pruneJournal(j *bolt.Bucket, cutoff time.Time, limit int) (int, error) {
	c := j.Cursor()
	var drop [][]byte
	for k, v := c.First(); k != nil && len(drop) < limit; k, v = c.Next() {
		var e struct{ At time.Time }
		if err := json.Unmarshal(v, &e); err != nil || !e.At.Before(cutoff) {
			break
		}
		drop = append(drop, bytes.Clone(k))
	}
	for _, k := range drop {
		if err := j.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(drop), nil
}

// Verify scans the whole file and checks the queue's invariants: every key
// is in exactly one state, the pending, due, synced and quarantine buckets
// agree with the keys bucket, and the counters equal a full count. It is
// for tests and diagnostics; it costs a full scan.
func (q *Queue) Verify() error {
	return q.db.View(func(tx *bolt.Tx) error {
		b := buckets(tx)
		due, err := b.dueEntries()
		if err != nil {
			return err
		}
		if err := b.keys.check(); err != nil {
			return err
		}
		counts := make(map[[2]byte]uint64)
		seqs := make(map[uint64][16]byte)
		err = b.keys.ForEach(func(k, v []byte) error {
			e, err := unmarshalKeyEntry(v)
			if err != nil {
				return fmt.Errorf("key %x: %w", k, err)
			}
			en, err := b.resolve(k, e, true)
			if err != nil {
				return err
			}
			counts[[2]byte{byte(en.State), byte(en.Class)}]++
			if prev, dup := seqs[en.Seq]; dup {
				return fmt.Errorf("keys %x and %x share sequence %d", prev, k, en.Seq)
			}
			seqs[en.Seq] = [16]byte(k)
			return b.checkKey(k, e, en, due)
		})
		if err != nil {
			return err
		}
		return b.checkTotals(counts, uint64(len(due)))
	})
}

// dueEntries reads the due bucket: each pending sequence's next attempt.
func (b txBuckets) dueEntries() (map[uint64]time.Time, error) {
	due := make(map[uint64]time.Time)
	err := b.due.ForEach(func(k, _ []byte) error {
		if len(k) != 16 {
			return fmt.Errorf("due entry of %d bytes", len(k))
		}
		t, seq := parseDueKey(k)
		if _, dup := due[seq]; dup {
			return fmt.Errorf("sequence %d is due twice", seq)
		}
		due[seq] = t
		return nil
	})
	return due, err
}

// checkKey checks that one key's state agrees with the buckets: a pending
// key has its record and due entry and nothing else, a quarantined key
// only its quarantine record, a synced key only its synced entry, a purged
// key none.
func (b txBuckets) checkKey(k []byte, e keyEntry, en Entry, due map[uint64]time.Time) error {
	pv := b.pending.Get(u64(en.Seq))
	qv := b.quarantine.Get(k)
	_, sv, err := b.syncedGet(en.Seq)
	if err != nil {
		return err
	}
	switch en.State {
	case Pending:
		if qv != nil || sv {
			return fmt.Errorf("pending key %x: quarantine record %v, synced entry %v", k, qv != nil, sv)
		}
		r := en.Record
		if r == nil || r.Key != [16]byte(k) || r.Seq != en.Seq {
			return fmt.Errorf("pending key %x: record does not match", k)
		}
		if t, ok := due[r.Seq]; !ok || !t.Equal(time.Unix(0, max(r.NextAt.UnixNano(), 0))) {
			return fmt.Errorf("pending key %x: no due entry at its next attempt", k)
		}
	case Quarantined:
		if pv != nil || qv == nil || sv {
			return fmt.Errorf("quarantined key %x: pending record %v, quarantine record %v, synced entry %v", k, pv != nil, qv != nil, sv)
		}
		if r := en.Record; r == nil || r.Seq != en.Seq || r.Class != e.Class {
			return fmt.Errorf("quarantined key %x: record does not match", k)
		}
	case Synced:
		if pv != nil || qv != nil {
			return fmt.Errorf("synced key %x still has a record", k)
		}
	case Purged:
		if pv != nil || qv != nil || sv {
			return fmt.Errorf("purged key %x still has a record", k)
		}
	default:
		return fmt.Errorf("key %x in unknown state %d", k, en.State)
	}
	return nil
}

// checkTotals checks the counters and the buckets' sizes against the
// counts of a full scan of the keys (per state and class), and that the
// synced blocks hold ascending sequences.
func (b txBuckets) checkTotals(counts map[[2]byte]uint64, due uint64) error {
	total := func(st State) uint64 { return counts[[2]byte{byte(st), 0}] + counts[[2]byte{byte(st), 1}] }
	for _, st := range States {
		for _, c := range movement.Classes {
			got := getU64(b.meta, counterKey(st, c))
			if want := counts[[2]byte{byte(st), byte(c)}]; got != want {
				return fmt.Errorf("counter %s/%s = %d, full scan counts %d", st, c, got, want)
			}
		}
	}
	if n := uint64(b.pending.Stats().KeyN); n != total(Pending) {
		return fmt.Errorf("%d pending records for %d pending keys", n, total(Pending))
	}
	if due != total(Pending) {
		return fmt.Errorf("%d due entries for %d pending keys", due, total(Pending))
	}
	var synced, last uint64
	err := b.forEachSyncedBlock(func(k []byte, es []syncedEntry) (bool, error) {
		if synced > 0 && es[0].Seq <= last {
			return false, fmt.Errorf("synced block %x starts at or below sequence %d, which the block before holds", k, last)
		}
		synced += uint64(len(es))
		last = es[len(es)-1].Seq
		return true, nil
	})
	if err != nil {
		return err
	}
	if synced != total(Synced) {
		return fmt.Errorf("%d synced entries for %d synced keys", synced, total(Synced))
	}
	if n, want := uint64(b.quarantine.Stats().KeyN), total(Quarantined); n != want {
		return fmt.Errorf("%d quarantine records for %d quarantined keys", n, want)
	}
	return nil
}
