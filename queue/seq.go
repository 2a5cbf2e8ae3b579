package queue

import (
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// SeqState is what the file holds for one per-store sequence.
type SeqState struct {
	Seq uint64
	// State is 0 when the file holds nothing for Seq: either it was never
	// assigned (Seq > Lookup.Last) or its key was synced and then pruned
	// after retention.synced_keys.
	State     State
	Key       [16]byte
	At        time.Time // when the key entered its state
	StreamSeq uint64    // central's stream sequence, when synced
	Reason    string    // the quarantine reason, when quarantined
}

// Lookup is the answer of LookupSeqs.
type Lookup struct {
	// Last is the last sequence assigned: every sequence from 1 to Last
	// was given to a movement the agent acknowledged.
	Last uint64
	// States holds one entry per distinct sequence asked, ascending.
	States []SeqState
	// Scanned counts the entries of the keys bucket read to answer (none
	// when every sequence asked is pending, synced or never assigned).
	Scanned int
}

// LastSeq is the last sequence the queue assigned (0 when none): the
// highest sequence of a movement the agent acknowledged.
func (q *Queue) LastSeq() (uint64, error) {
	var last uint64
	err := q.db.View(func(tx *bolt.Tx) error {
		last = getU64(tx.Bucket(bucketMeta), metaNextSeq)
		return nil
	})
	return last, err
}

// LookupSeqs says, in one read transaction, what the file holds for each
// of seqs. Pending and synced movements are read directly (the pending
// and synced buckets are keyed by sequence); the others (quarantined and
// purged) are found by one pass over the keys bucket, reading only the
// entries of keys in those states and stopping as soon as every sequence
// asked was found. The pass costs the number of keys held, not the number
// asked, and is made only when a sequence asked is neither pending nor
// synced; callers bound how many sequences they ask at once.
func (q *Queue) LookupSeqs(seqs []uint64) (Lookup, error) {
	want := slices.Clone(seqs)
	slices.Sort(want)
	want = slices.Compact(want)
	var out Lookup
	err := q.db.View(func(tx *bolt.Tx) error {
		b := buckets(tx)
		sr := b.syncedReader()
		out = Lookup{Last: getU64(b.meta, metaNextSeq), States: make([]SeqState, len(want))}
		index := make(map[uint64]int, len(want))
		for i, s := range want {
			out.States[i] = SeqState{Seq: s}
			if s == 0 || s > out.Last {
				continue
			}
			if v := b.pending.Get(u64(s)); v != nil {
				h, err := peekRecord(v)
				if err != nil {
					return err
				}
				out.States[i] = SeqState{Seq: s, State: Pending, Key: h.Key, At: h.EnqueuedAt}
				continue
			}
			if e, ok, err := sr.get(s); err != nil {
				return err
			} else if ok {
				out.States[i] = SeqState{Seq: s, State: Synced, Key: e.Key, At: e.At, StreamSeq: e.StreamSeq}
				continue
			}
			index[s] = i
		}
		if len(index) == 0 {
			return nil
		}
		return b.keys.Each(func(k, v []byte) (bool, error) {
			out.Scanned++
			if len(v) == 0 || v[0] != entryLong {
				return true, nil // pending or synced: read above
			}
			e, err := unmarshalKeyEntry(v)
			if err != nil {
				return false, err
			}
			i, ok := index[e.Seq]
			if !ok || e.State == Pending {
				return true, nil
			}
			delete(index, e.Seq)
			st := SeqState{Seq: e.Seq, State: e.State, Key: [16]byte(k), At: e.At}
			if e.State == Quarantined {
				if rv := b.quarantine.Get(k); rv != nil {
					r, err := unmarshalRecord(k, rv)
					if err != nil {
						return false, err
					}
					if r.Quarantine != nil {
						st.Reason = r.Quarantine.Reason
					}
				}
			}
			out.States[i] = st
			return len(index) > 0, nil
		})
	})
	return out, err
}

// LastSyncedAt is when the file last recorded a movement as synced, or the
// zero time when it never did: what a stopped agent last delivered.
func (q *Queue) LastSyncedAt() (time.Time, error) {
	var at time.Time
	err := q.db.View(func(tx *bolt.Tx) error {
		if v := getU64(tx.Bucket(bucketMeta), metaLastSynced); v != 0 {
			at = time.Unix(0, int64(v)).UTC()
		}
		return nil
	})
	return at, err
}
