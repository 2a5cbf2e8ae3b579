package remote

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/rxedge/agent/queue"
)

// CmdReconcile asks a store what it holds for sequences that central's
// archive lacks (see package reconcile). It only reads, but must be
// signed: it is not one of the reads control.allow_unsigned_reads lets
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

// checkSeqs validates the ranges of a reconcile request and returns how
// many sequences they name.
func checkSeqs(seqs []SeqRange) (int, error) {
	switch {
	case len(seqs) == 0:
		return 0, &badRequest{"seqs must name at least one range [from,to]"}
	case len(seqs) > MaxReconcileRanges:
		return 0, &badRequest{fmt.Sprintf("seqs has %d ranges: at most %d ranges of at most %d sequences in all may be asked at once", len(seqs), MaxReconcileRanges, MaxReconcileSeqs)}
	}
	n := 0
	for _, r := range seqs {
		if r[0] == 0 || r[0] > r[1] {
			return 0, &badRequest{"each range [from,to] must have 1 ≤ from ≤ to"}
		}
		if r[1]-r[0] >= MaxReconcileSeqs || n+int(r[1]-r[0]+1) > MaxReconcileSeqs {
			return 0, &badRequest{fmt.Sprintf("at most %d sequences may be asked at once: split the request", MaxReconcileSeqs)}
		}
		n += int(r[1] - r[0] + 1)
	}
	return n, nil
}

// reconcile answers what the store holds for the sequences asked.
func (r *Responder) reconcile(a ReconcileArgs, n int) (ReconcileResult, error) {
	seqs := make([]uint64, 0, n)
	for _, rg := range a.Seqs {
		for s := rg[0]; ; s++ {
			seqs = append(seqs, s)
			if s == rg[1] {
				break
			}
		}
	}
	lk, err := r.o.Queue.LookupSeqs(seqs)
	if err != nil {
		return ReconcileResult{}, err
	}
	purged := map[string]string{}
	var since time.Time
	for _, st := range lk.States {
		if st.State == queue.Purged {
			purged[hex.EncodeToString(st.Key[:])] = ""
			if since.IsZero() || st.At.Before(since) {
				since = st.At
			}
		}
	}
	if len(purged) > 0 {
		// A key is purged once, from quarantine: stop at the last one's
		// event rather than decode the rest of the journal.
		left := len(purged)
		err := r.o.Queue.Events(since, func(e queue.Event) bool {
			if e.Action != queue.ActionPurge {
				return true
			}
			for _, k := range e.Keys {
				if why, ok := purged[k]; ok && why == "" {
					purged[k] = clipReason("by " + e.Actor + ": " + e.Reason)
					left--
				}
			}
			return left > 0
		})
		if err != nil {
			return ReconcileResult{}, err
		}
	}
	res := ReconcileResult{Highest: lk.Last, Runs: []SeqRun{}}
	for _, st := range lk.States {
		state, reason := SeqUnknown, SeqNotAssigned
		switch st.State {
		case queue.Pending:
			state, reason = SeqPending, ""
		case queue.Quarantined:
			state, reason = SeqQuarantined, clipReason(st.Reason)
		case queue.Purged:
			state, reason = SeqPurged, purged[hex.EncodeToString(st.Key[:])]
			if reason == "" {
				reason = "no journal entry (pruned)"
			}
		case queue.Synced:
			state, reason = SeqSynced, ""
			if !a.SyncedAfter.IsZero() && !st.At.Before(a.SyncedAfter) {
				reason = SeqRecent
			}
		default:
			if st.Seq >= 1 && st.Seq <= lk.Last {
				reason = SeqPruned
			}
		}
		if k := len(res.Runs) - 1; k >= 0 && res.Runs[k].To+1 == st.Seq && res.Runs[k].State == state && res.Runs[k].Reason == reason {
			res.Runs[k].To = st.Seq
			continue
		}
		res.Runs = append(res.Runs, SeqRun{From: st.Seq, To: st.Seq, State: state, Reason: reason})
	}
	r.o.Logger.Info("REMOTE_RECONCILE", "asked", len(lk.States), "runs", len(res.Runs), "highest", lk.Last, "keys_read", lk.Scanned)
	return res, nil
}

// MaxReasonRunes bounds a reason in a reconcile answer.
const MaxReasonRunes = 120

func clipReason(s string) string {
	if r := []rune(s); len(r) > MaxReasonRunes {
		return string(r[:MaxReasonRunes-1]) + "…"
	}
	return s
}
