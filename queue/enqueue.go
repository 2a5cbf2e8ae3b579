package queue

import (
	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

// Result is the answer for one submitted movement.
type Result struct {
	Key       [16]byte
	Seq       uint64 // the per-store sequence assigned at enqueue
	Duplicate bool   // the movement was already held; nothing was written for it
}

// Enqueue stores a submission of movements durably and returns one Result
// per movement, in order. It returns only after the group commit holding the
// submission was fsynced. The submission is all-or-nothing: a movement whose
// movement_id is held with other content (*ConflictError) or was purged
// (*PurgedError) rejects the whole submission and nothing is stored. A
// movement already held with the same content is a duplicate: it keeps its
// key and sequence and is not written again.
func (q *Queue) Enqueue(items []movement.Prepared) ([]Result, error) {
	res := make([]Result, len(items))
	grew := false
	err := q.do(func(tx *bolt.Tx) error {
		now := q.opts.Clock()
		keys := tx.Bucket(bucketKeys)
		first := make(map[[16]byte]int, len(items)) // key → index of its first new occurrence
		var fresh []int
		for i := range items {
			it := &items[i]
			res[i] = Result{Key: it.Key}
			if j, ok := first[it.Key]; ok {
				if items[j].Digest != it.Digest {
					return &ConflictError{Index: i, Key: it.Key, Other: j}
				}
				res[i].Duplicate = true
				continue
			}
			if v := keys.Get(it.Key[:]); v != nil {
				e, err := unmarshalKeyEntry(v)
				if err != nil {
					return err
				}
				switch {
				case e.State == Purged:
					return &PurgedError{Index: i, Key: it.Key}
				case e.Digest != it.Digest:
					return &ConflictError{Index: i, Key: it.Key, State: e.State}
				}
				res[i].Seq = e.Seq
				res[i].Duplicate = true
				continue
			}
			first[it.Key] = i
			fresh = append(fresh, i)
		}
		if len(fresh) == 0 {
			return nil
		}

		// Nothing was written above; from here on every error aborts the group.
		meta := tx.Bucket(bucketMeta)
		pending := tx.Bucket(bucketPending)
		due := tx.Bucket(bucketDue)
		seq := getU64(meta, metaNextSeq)
		var added [2]int64
		for _, i := range fresh {
			it := &items[i]
			seq++
			rec := Record{
				Seq: seq, Key: it.Key, Digest: it.Digest, Class: it.Class,
				Schedule: it.Schedule, MovementID: it.MovementID, Payload: it.Payload,
				EnqueuedAt: now, NextAt: now,
			}
			if err := pending.Put(u64(seq), rec.marshal()); err != nil {
				return fatal(err)
			}
			if err := due.Put(dueKey(now, seq), nil); err != nil {
				return fatal(err)
			}
			e := keyEntry{State: Pending, Class: it.Class, Seq: seq, At: now, Digest: it.Digest}
			if err := keys.Put(it.Key[:], e.marshal()); err != nil {
				return fatal(err)
			}
			res[i].Seq = seq
			added[it.Class]++
		}
		for c, n := range added {
			if n != 0 {
				if err := addU64(meta, counterKey(Pending, movement.Class(c)), n); err != nil {
					return fatal(err)
				}
			}
		}
		if err := meta.Put(metaNextSeq, u64(seq)); err != nil {
			return fatal(err)
		}
		grew = true
		// Duplicates of movements that are new in this submission take
		// their sequence now that it is assigned.
		for i := range items {
			if res[i].Duplicate && res[i].Seq == 0 {
				res[i].Seq = res[first[items[i].Key]].Seq
			}
		}
		return nil
	}, func() {
		if grew {
			q.notify()
		}
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func counterKey(s State, c movement.Class) []byte {
	return []byte{'c', byte(s), byte(c)}
}
