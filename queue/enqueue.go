package queue

import (
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/movement"
)

// Result is the answer for one submitted movement.
type Result struct {
	Key       [16]byte
	Seq       uint64 // the per-store sequence assigned at enqueue
	Duplicate bool   // the movement was already held; nothing was written for it
	// Err is why EnqueueEach refused the movement (*ConflictError or
	// *PurgedError); nothing was written for it and Seq is 0. Enqueue
	// never sets it: it refuses the whole submission instead.
	Err error
}

// Enqueue stores a submission of movements durably and returns one Result
// per movement, in order. It returns only after the group commit holding the
// submission was fsynced. The submission is all-or-nothing: a movement whose
// movement_id is held with other content (*ConflictError) or was purged
// (*PurgedError) rejects the whole submission and nothing is stored. A
// movement already held with the same content is a duplicate: it keeps its
// key and sequence and is not written again.
func (q *Queue) Enqueue(items []movement.Prepared) ([]Result, error) {
	sub := q.submission(items, true)
	if err := q.do(&sub.op); err != nil {
		return nil, err
	}
	return sub.sorted.res, nil
}

// EnqueueEach stores what it can of a submission, durably and in one
// transaction, and returns one Result per movement, in order. Each movement
// is stored, found a duplicate, or refused on its own: a refused movement's
// Result has Err set (*ConflictError or *PurgedError, whose Index and Other
// are positions in items), nothing is written for it, and it does not stop
// the others. A refused movement counts for nothing in the decisions about
// later ones: a later movement with the same movement_id is compared with
// the movement held or, when none is held, with the movement of the
// submission that stored it. The answers are those Enqueue would give if
// every refused movement were taken out of the submission. EnqueueEach
// returns only after the group commit holding the submission was fsynced;
// an error means nothing of the submission was stored.
func (q *Queue) EnqueueEach(items []movement.Prepared) ([]Result, error) {
	sub := q.submission(items, false)
	if err := q.do(&sub.op); err != nil {
		return nil, err
	}
	return sub.sorted.res, nil
}

// submission is the op that stores a submission; sorted holds its answers
// once the op committed. With whole (Enqueue), the first refused movement
// rejects the submission; without (EnqueueEach), each refused movement is
// left out.
type submission struct {
	op
	sorted *sorted
}

func (q *Queue) submission(items []movement.Prepared, whole bool) *submission {
	sub := &submission{}
	grew := false
	sub.op = op{
		check: func(v view) error {
			s, err := sortItems(v, items)
			if err != nil {
				return err
			}
			sub.sorted = s
			if !whole {
				return nil
			}
			for _, r := range s.res {
				if r.Err != nil {
					return reject(r.Err)
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
	res   []Result         // Err set for a refused movement
	fresh []int            // the items to write, in order
	first map[[16]byte]int // key → the fresh item that holds it
}

// sortItems decides, reading only, what becomes of each movement of a
// submission: new, a duplicate of one held or of an earlier one in the
// submission, or refused (*ConflictError, *PurgedError). A refused
// movement counts for nothing in the decisions about later ones. A
// movement whose digest differs from the held one's only by the spelling
// of its NDC (movement.Prepared.Equivalent) is a duplicate: the first
// spelling is kept.
func sortItems(v view, items []movement.Prepared) (*sorted, error) {
	s := &sorted{
		res:   make([]Result, len(items)),
		first: make(map[[16]byte]int, len(items)),
	}
	for i := range items {
		it := &items[i]
		s.res[i] = Result{Key: it.Key}
		if j, ok := s.first[it.Key]; ok {
			if !it.Equivalent(items[j].Digest) {
				s.res[i].Err = &ConflictError{Index: i, Key: it.Key, Other: j}
				continue
			}
			s.res[i].Duplicate = true
			continue
		}
		if e, err := v.buckets().lookup(it.Key[:], false); !errors.Is(err, ErrNotFound) {
			if err != nil {
				return nil, err
			}
			switch {
			case e.State == Purged:
				s.res[i].Err = &PurgedError{Index: i, Key: it.Key}
			case !it.Equivalent(e.Digest):
				s.res[i].Err = &ConflictError{Index: i, Key: it.Key, State: e.State}
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
	// Sequences and due times only grow: fill the pages they append to.
	b.pending.FillPercent, b.due.FillPercent = 1.0, 1.0
	seq := getU64(b.meta, metaNextSeq)
	var added [2]int64
	leaves := make([]ledger.Leaf, 0, len(s.fresh))
	for _, i := range s.fresh {
		it := &items[i]
		seq++
		rec := Record{
			Seq: seq, Key: it.Key, Digest: it.Digest, Class: it.Class,
			Schedule: it.Schedule, MovementID: it.MovementID, Payload: it.Payload,
			EnqueuedAt: now, NextAt: now,
		}
		if err := b.pending.Put(u64(seq), rec.marshal(false)); err != nil {
			return err
		}
		if err := b.due.Put(dueKey(now, seq), nil); err != nil {
			return err
		}
		if err := b.keys.Put(it.Key[:], shortEntry(seq)); err != nil {
			return err
		}
		s.res[i].Seq = seq
		added[it.Class]++
		leaves = append(leaves, ledger.Leaf{Seq: seq, Key: it.Key, Digest: it.Digest})
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
	if err := q.logLeaves(tx, leaves); err != nil {
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
