package queue

import bolt "go.etcd.io/bbolt"

// Shorthands for this package's tests; the product settles through Settle.

// DB exposes the underlying database for read-only inspection of
// invariants. Callers must not write through it.
func (q *Queue) DB() *bolt.DB { return q.db }

// MarkSynced settles acknowledgements only.
func (q *Queue) MarkSynced(acks []Ack) error { return q.Settle(Settlement{Acks: acks}) }

// Retry settles retries only.
func (q *Queue) Retry(retries []RetryAt) error { return q.Settle(Settlement{Retries: retries}) }

// Quarantine settles quarantines only.
func (q *Queue) Quarantine(items []QuarantineAt) error {
	return q.Settle(Settlement{Quarantines: items})
}

// ForEachPending calls fn for every pending movement, in sequence order,
// until fn returns false.
func (q *Queue) ForEachPending(fn func(*Record) bool) error {
	return q.forEach(bucketPending, fn)
}
