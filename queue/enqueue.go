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
	sub := q.submission(items)
	if err := q.do(&sub.op); err != nil {
		return nil, err
	}
	return sub.sorted.res, nil
}

// submission is the op that stores a submission; sorted holds its answers
// once the op committed.
type submission struct {
	op
	sorted *sorted
}

func (q *Queue) submission(items []movement.Prepared) *submission {
	sub := &submission{}
	grew := false
	sub.op = op{
		check: func(v view) error {
			s, err := sortItems(v, items)
			if err != nil {
				return err
			}
			sub.sorted = s
			for _, e := range s.refused {
				if e != nil {
					return reject(e)
				}
			}
			return nil
		},
		apply: func(tx *bolt.Tx) error {
			grew = len(sub.sorted.fresh) > 0
			return q.store(tx, items, sub.sorted)
		},
		after: func() {
			if grew {
				q.notify()
			}
		},
	}
	return sub
}

// sorted is a submission sorted against what the file holds and what
// came before each movement in the submission.
type sorted struct {
	res     []Result
	refused []error          // refused[i] is why item i cannot be stored, or nil
	fresh   []int            // the items to write, in order
	first   map[[16]byte]int // key → the fresh item that holds it
}

// sortItems decides, reading only, what becomes of each movement of a
// submission: new, a duplicate of one held or of an earlier one in the
// submission, or refused (*ConflictError, *PurgedError). A refused
// movement counts for nothing in the decisions about later ones.
func sortItems(v view, items []movement.Prepared) (*sorted, error) {
	s := &sorted{
		res:     make([]Result, len(items)),
		refused: make([]error, len(items)),
		first:   make(map[[16]byte]int, len(items)),
	}
	for i := range items {
		it := &items[i]
		s.res[i] = Result{Key: it.Key}
		if j, ok := s.first[it.Key]; ok {
			if items[j].Digest != it.Digest {
				s.refused[i] = &ConflictError{Index: i, Key: it.Key, Other: j}
				continue
			}
			s.res[i].Duplicate = true
			continue
		}
		if b := v.get(bucketKeys, it.Key[:]); b != nil {
			e, err := unmarshalKeyEntry(b)
			if err != nil {
				return nil, err
			}
			switch {
			case e.State == Purged:
				s.refused[i] = &PurgedError{Index: i, Key: it.Key}
			case e.Digest != it.Digest:
				s.refused[i] = &ConflictError{Index: i, Key: it.Key, State: e.State}
			default:
				s.res[i].Seq = e.Seq
				s.res[i].Duplicate = true
			}
			continue
		}
		s.first[it.Key] = i
		s.fresh = append(s.fresh, i)
	}
	return s, nil
}

// store writes the fresh movements of a sorted submission as pending and
// gives them, and their duplicates within the submission, their sequence.
func (q *Queue) store(tx *bolt.Tx, items []movement.Prepared, s *sorted) error {
	if len(s.fresh) == 0 {
		return nil
	}
	now := q.opts.Clock()
	b := buckets(tx)
	seq := getU64(b.meta, metaNextSeq)
	var added [2]int64
	for _, i := range s.fresh {
		it := &items[i]
		seq++
		rec := Record{
			Seq: seq, Key: it.Key, Digest: it.Digest, Class: it.Class,
			Schedule: it.Schedule, MovementID: it.MovementID, Payload: it.Payload,
			EnqueuedAt: now, NextAt: now,
		}
		if err := b.pending.Put(u64(seq), rec.marshal()); err != nil {
			return err
		}
		if err := b.due.Put(dueKey(now, seq), nil); err != nil {
			return err
		}
		e := keyEntry{State: Pending, Class: it.Class, Seq: seq, At: now, Digest: it.Digest}
		if err := b.keys.Put(it.Key[:], e.marshal()); err != nil {
			return err
		}
		s.res[i].Seq = seq
		added[it.Class]++
	}
	for c, n := range added {
		if n != 0 {
			if err := b.count(Pending, movement.Class(c), n); err != nil {
				return err
			}
		}
	}
	if err := b.meta.Put(metaNextSeq, u64(seq)); err != nil {
		return err
	}
	for i := range items {
		if s.res[i].Duplicate && s.res[i].Seq == 0 {
			s.res[i].Seq = s.res[s.first[items[i].Key]].Seq
		}
	}
	return nil
}

func counterKey(s State, c movement.Class) []byte {
	return []byte{'c', byte(s), byte(c)}
}
