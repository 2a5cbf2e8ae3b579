package remote

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/queue"
)

// checkSeqs validates the ranges of a reconcile request and returns how
// many sequences they name.
func checkSeqs(seqs []command.SeqRange) (int, error) {
	switch {
	case len(seqs) == 0:
		return 0, &badRequest{"seqs must name at least one range [from,to]"}
	case len(seqs) > command.MaxReconcileRanges:
		return 0, &badRequest{fmt.Sprintf("seqs has %d ranges: at most %d ranges of at most %d sequences in all may be asked at once", len(seqs), command.MaxReconcileRanges, command.MaxReconcileSeqs)}
	}
	n := 0
	for _, r := range seqs {
		if r[0] == 0 || r[0] > r[1] {
			return 0, &badRequest{"each range [from,to] must have 1 ≤ from ≤ to"}
		}
		if r[1]-r[0] >= command.MaxReconcileSeqs || n+int(r[1]-r[0]+1) > command.MaxReconcileSeqs {
			return 0, &badRequest{fmt.Sprintf("at most %d sequences may be asked at once: split the request", command.MaxReconcileSeqs)}
		}
		n += int(r[1] - r[0] + 1)
	}
	return n, nil
}

// reconcile answers what the store holds for the sequences asked.
func (r *Responder) reconcile(a command.ReconcileArgs, n int) (command.ReconcileResult, error) {
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
		return command.ReconcileResult{}, err
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
			return command.ReconcileResult{}, err
		}
	}
	res := command.ReconcileResult{Highest: lk.Last, Runs: []command.SeqRun{}}
	for _, st := range lk.States {
		state, reason := command.SeqUnknown, command.SeqNotAssigned
		switch st.State {
		case queue.Pending:
			state, reason = command.SeqPending, ""
		case queue.Quarantined:
			state, reason = command.SeqQuarantined, clipReason(st.Reason)
		case queue.Purged:
			state, reason = command.SeqPurged, purged[hex.EncodeToString(st.Key[:])]
			if reason == "" {
				reason = "no journal entry (pruned)"
			}
		case queue.Synced:
			state, reason = command.SeqSynced, ""
			if !a.SyncedAfter.IsZero() && !st.At.Before(a.SyncedAfter) {
				reason = command.SeqRecent
			}
		default:
			if st.Seq >= 1 && st.Seq <= lk.Last {
				reason = command.SeqPruned
			}
		}
		if k := len(res.Runs) - 1; k >= 0 && res.Runs[k].To+1 == st.Seq && res.Runs[k].State == state && res.Runs[k].Reason == reason {
			res.Runs[k].To = st.Seq
			continue
		}
		res.Runs = append(res.Runs, command.SeqRun{From: st.Seq, To: st.Seq, State: state, Reason: reason})
	}
	r.o.Logger.Info("REMOTE_RECONCILE", "asked", len(lk.States), "runs", len(res.Runs), "highest", lk.Last, "keys_read", lk.Scanned)
	return res, nil
}

func clipReason(s string) string {
	if r := []rune(s); len(r) > command.MaxReasonRunes {
		return string(r[:command.MaxReasonRunes-1]) + "…"
	}
	return s
}
