package queue

import (
	"bytes"
	"encoding/binary"
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
			r, err := unmarshalRecord(v)
			if err != nil {
				return err
			}
			s.OldestPending = r.EnqueuedAt
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
		v := tx.Bucket(bucketKeys).Get(key[:])
		if v == nil {
			return ErrNotFound
		}
		ke, err := unmarshalKeyEntry(v)
		if err != nil {
			return err
		}
		e = Entry{Key: key, State: ke.State, Class: ke.Class, Seq: ke.Seq, StreamSeq: ke.StreamSeq, At: ke.At, Digest: ke.Digest}
		var rv []byte
		switch ke.State {
		case Pending:
			rv = tx.Bucket(bucketPending).Get(u64(ke.Seq))
		case Quarantined:
			rv = tx.Bucket(bucketQuarantine).Get(key[:])
		}
		if rv != nil {
			if e.Record, err = unmarshalRecord(rv); err != nil {
				return err
			}
		}
		return nil
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
			r, err := unmarshalRecord(v)
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
func (q *Queue) Prune(syncedHorizon, journalRetention time.Duration, limit int) (int, error) {
	var n int
	err := q.do(&op{apply: func(tx *bolt.Tx) error {
		now := q.opts.Clock()
		n = 0
		b := buckets(tx)
		if syncedHorizon > 0 {
			cutoff := syncedKey(now.Add(-syncedHorizon), [16]byte{})
			c := b.syncedAt.Cursor()
			var drop [][]byte
			for k, _ := c.First(); k != nil && bytes.Compare(k, cutoff) < 0 && len(drop) < limit; k, _ = c.Next() {
				drop = append(drop, bytes.Clone(k))
			}
			for _, k := range drop {
				key := k[8:]
				if v := b.keys.Get(key); v != nil {
					e, err := unmarshalKeyEntry(v)
					if err != nil {
						return err
					}
					if e.State == Synced {
						if err := b.keys.Delete(key); err != nil {
							return err
						}
						if err := b.count(Synced, e.Class, -1); err != nil {
							return err
						}
					}
				}
				if err := b.syncedAt.Delete(k); err != nil {
					return err
				}
				n++
			}
		}
		if journalRetention > 0 {
			cutoff := now.Add(-journalRetention)
			j := tx.Bucket(bucketJournal)
			c := j.Cursor()
			var drop [][]byte
			for k, v := c.First(); k != nil && n+len(drop) < limit; k, v = c.Next() {
				var e struct{ At time.Time }
				if err := json.Unmarshal(v, &e); err != nil || !e.At.Before(cutoff) {
					break
				}
				drop = append(drop, bytes.Clone(k))
			}
			for _, k := range drop {
				if err := j.Delete(k); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	}})
	return n, err
}

// Verify scans the whole file and checks the queue's invariants: every key
// is in exactly one state, the pending, due and quarantine buckets agree
// with the keys bucket, and the counters equal a full count. It is for
// tests and diagnostics; it costs a full scan.
func (q *Queue) Verify() error {
	return q.db.View(func(tx *bolt.Tx) error {
		b := buckets(tx)
		counts := make(map[[2]byte]uint64)
		seqs := make(map[uint64][16]byte)
		err := b.keys.ForEach(func(k, v []byte) error {
			e, err := unmarshalKeyEntry(v)
			if err != nil {
				return fmt.Errorf("key %x: %w", k, err)
			}
			counts[[2]byte{byte(e.State), byte(e.Class)}]++
			if prev, dup := seqs[e.Seq]; dup {
				return fmt.Errorf("keys %x and %x share sequence %d", prev, k, e.Seq)
			}
			seqs[e.Seq] = [16]byte(k)
			pv := b.pending.Get(u64(e.Seq))
			qv := b.quarantine.Get(k)
			switch e.State {
			case Pending:
				if pv == nil || qv != nil {
					return fmt.Errorf("pending key %x: pending record %v, quarantine record %v", k, pv != nil, qv != nil)
				}
				r, err := unmarshalRecord(pv)
				if err != nil {
					return err
				}
				if !bytes.Equal(r.Key[:], k) || r.Digest != e.Digest {
					return fmt.Errorf("pending key %x: record holds key %x", k, r.Key)
				}
				if b.due.Get(dueKey(r.NextAt, r.Seq)) == nil {
					return fmt.Errorf("pending key %x: no due entry", k)
				}
			case Quarantined:
				if pv != nil || qv == nil {
					return fmt.Errorf("quarantined key %x: pending record %v, quarantine record %v", k, pv != nil, qv != nil)
				}
			case Synced, Purged:
				if pv != nil || qv != nil {
					return fmt.Errorf("%s key %x still has a record", e.State, k)
				}
			default:
				return fmt.Errorf("key %x in unknown state %d", k, e.State)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if n, m := b.pending.Stats().KeyN, b.due.Stats().KeyN; n != m {
			return fmt.Errorf("%d pending records but %d due entries", n, m)
		}
		for _, st := range States {
			for _, c := range movement.Classes {
				got := getU64(b.meta, counterKey(st, c))
				if want := counts[[2]byte{byte(st), byte(c)}]; got != want {
					return fmt.Errorf("counter %s/%s = %d, full scan counts %d", st, c, got, want)
				}
			}
		}
		if n := uint64(b.pending.Stats().KeyN); n != counts[[2]byte{byte(Pending), 0}]+counts[[2]byte{byte(Pending), 1}] {
			return fmt.Errorf("%d pending records for %d pending keys", n, counts[[2]byte{byte(Pending), 0}]+counts[[2]byte{byte(Pending), 1}])
		}
		if n, want := uint64(b.quarantine.Stats().KeyN), counts[[2]byte{byte(Quarantined), 0}]+counts[[2]byte{byte(Quarantined), 1}]; n != want {
			return fmt.Errorf("%d quarantine records for %d quarantined keys", n, want)
		}
		return checkDue(b)
	})
}

func checkDue(b txBuckets) error {
	return b.due.ForEach(func(k, _ []byte) error {
		if len(k) != 16 {
			return fmt.Errorf("due entry of %d bytes", len(k))
		}
		seq := binary.BigEndian.Uint64(k[8:])
		if b.pending.Get(u64(seq)) == nil {
			return fmt.Errorf("due entry for sequence %d has no pending record", seq)
		}
		return nil
	})
}
