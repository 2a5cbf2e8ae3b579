package command

import (
	"time"
)

// CmdReconcile asks a store what it holds for sequences that central's
// archive lacks (see package reconcile). It only reads, but must be
// signed: it is not one of the reads remote.allow_unsigned_reads lets
// through.
const CmdReconcile = "reconcile"

// Limits of a reconcile request: its envelope must fit in
// MaxEnvelopeBytes, and the store answers from one read transaction.
const (
	// MaxReconcileSeqs bounds the sequences one request asks about.
	MaxReconcileSeqs = 10_000
	// MaxReconcileRanges bounds the ranges that name them: a thousand
	// ranges of the largest sequences take 44 KB of the envelope's 64 KiB.
	MaxReconcileRanges = 1_000
)

// SeqRange is the sequences From..To, both included, sent as [from,to].
type SeqRange [2]uint64

// ReconcileArgs are the arguments of reconcile.
type ReconcileArgs struct {
	// Seqs are the sequences asked about: at most MaxReconcileRanges
	// ranges of at most MaxReconcileSeqs sequences in all, each from 1.
	Seqs []SeqRange `json:"seqs"`
	// SyncedAfter, when set, makes the store answer a movement synced at
	// or after it as synced with reason SeqRecent: one central may not
	// have archived yet when it was read.
	SyncedAfter time.Time `json:"synced_after,omitzero"`
}

// States of a sequence in a reconcile answer.
const (
	SeqPending     = "pending"     // not yet delivered; Reason empty
	SeqQuarantined = "quarantined" // Reason is the quarantine reason
	SeqPurged      = "purged"      // Reason says who purged it and why
	SeqSynced      = "synced"      // central acknowledged it; Reason SeqRecent when after SyncedAfter
	SeqUnknown     = "unknown"     // Reason SeqNotAssigned or SeqPruned
)

// Reasons of a reconcile answer's runs.
const (
	SeqRecent      = "recent"       // synced at or after SyncedAfter
	SeqNotAssigned = "not_assigned" // above the last sequence the store assigned
	SeqPruned      = "pruned"       // assigned, but its key was synced and pruned after retention.synced_keys
)

// SeqRun is a run of consecutive sequences in the same state for the same
// reason.
type SeqRun struct {
	From   uint64 `json:"from"`
	To     uint64 `json:"to"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// ReconcileResult is a store's answer to reconcile: every sequence asked,
// once, in runs in ascending order.
type ReconcileResult struct {
	// Highest is the last sequence the store assigned, when it answered.
	Highest uint64   `json:"highest"`
	Runs    []SeqRun `json:"runs"`
}

// MaxReasonRunes bounds a reason in a reconcile answer.
const MaxReasonRunes = 120
