// Package queue is the agent's durable local store: one bbolt file holding
// every movement the agent has acknowledged, its state, the due index the
// sender reads, the quarantine, and the audit journal.
//
// Durability: Enqueue returns only after the transaction that holds the
// movements has been committed and fsynced (bbolt with NoSync off). A
// movement for which Enqueue returned no error survives a crash or power
// loss. Concurrent Enqueue calls are committed together by a single writer
// goroutine (group commit): one transaction and one fsync for many
// submissions, each acknowledged only after its group committed. An
// operation that fails commits nothing of itself, and the rest of its group
// commits without it. A submission is all-or-nothing: if any movement in it
// is rejected, none is stored.
//
// States: every key is in exactly one state, pending, synced, quarantined or
// purged, and moves between them only through the methods of Queue, each of
// which is one transaction across every bucket involved. Counters per state
// and class are kept in the same transactions, so Stats never scans.
//
// Ownership: all writes go through the writer goroutine; reads use bbolt
// read transactions and may run concurrently. The set of movements leased to
// the sender lives in memory only: after a restart every pending movement is
// due again, which is safe because delivery is keyed.
//
// Buckets (schema version 4):
//
//	meta        schema version, store id, counters, next sequence, lineage,
//	            the key index's secret
//	pending     seq (8 bytes, big endian) → pending record (without its seq)
//	due         next attempt time (8) + seq (8) → nothing
//	key_groups  the key index (keyindex.go): group (2) → its keys, each
//	            with its entry: the seq, for a pending or synced key;
//	            state, class, seq and time for a quarantined, purged or
//	            redriven key (and the digest for a purged one)
//	synced_blocks
//	            first seq (8) → up to 36 synced movements from it (key,
//	            digest, class, central sequence, time; synced.go)
//	quarantine  key (16) → quarantined record with its seq and failure context
//	journal     sequence (8) → audit event (JSON)
//	ledger, ledger_leaves, ledger_checkpoints
//	            the store's verifiable log, its leaf hashes since the last
//	            acknowledged checkpoint, the checkpoints signed (ledger.go)
//
// Acknowledging a movement moves it from pending to synced, both keyed by
// sequence, without writing its key's entry: a settlement writes in
// sequence order, not in the keys' hash order. A file of schema 2 or 3 is
// converted by Open in transactions of a bounded number of keys, resumed
// after a crash (see migrate.go).
package queue
