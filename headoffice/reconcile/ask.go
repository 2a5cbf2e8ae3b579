package reconcile

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/fleet"
)

// MaxRequestsPerChunk bounds the halving when a store answers that its
// reply is over max_payload: once a store has been sent this many
// requests per request of the first split, a request it says is too
// large is not halved again but left unexplained (bad_answer), so a
// store answering "too large" to everything is sent at most about twice
// that, not one request per sequence. 64 halves a request of 10,000
// sequences into some 32 pieces of about 300, whose answers fit
// nats-server's default max_payload (1 MiB) even with every run's reason
// at its longest.
const MaxRequestsPerChunk = 64

// chunk splits ranges into requests of at most maxSeqs sequences and
// maxRanges ranges each, in order.
func chunk(rs []Range, maxSeqs uint64, maxRanges int) [][]Range {
	var out [][]Range
	var cur []Range
	var n uint64
	for _, r := range rs {
		for r.From <= r.To {
			if n == maxSeqs || len(cur) == maxRanges {
				out, cur, n = append(out, cur), nil, 0
			}
			take := min(r.Len(), maxSeqs-n)
			cur = append(cur, Range{r.From, r.From + take - 1})
			n += take
			if r.From+take-1 == r.To {
				break
			}
			r.From += take
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// halve splits a request into two of about half its sequences.
func halve(rs []Range) ([]Range, []Range) {
	n := Count(rs)
	parts := chunk(rs, (n+1)/2, len(rs)+1)
	if len(parts) < 2 {
		return parts[0], nil
	}
	return parts[0], parts[1]
}

// explain asks the store about its missing sequences (sr.pending) and
// records what it said. It never fails: a store that does not answer, or
// answers badly, leaves its sequences unexplained, saying why.
func explain(ctx context.Context, o Options, sr *StoreReport, syncedAfter time.Time) {
	gaps := sr.pending
	if o.Asker == nil {
		for _, g := range gaps {
			sr.note(g, UnexplainedNotAsked, "", false, o.MaxListed)
		}
		return
	}
	var asked, notAsked []Range
	budget := o.MaxAskPerStore
	for _, g := range gaps {
		switch {
		case budget == 0:
			notAsked = append(notAsked, g)
		case g.Len() > budget:
			asked = append(asked, Range{g.From, g.From + budget - 1})
			notAsked = append(notAsked, Range{g.From + budget, g.To})
			budget = 0
		default:
			asked = append(asked, g)
			budget -= g.Len()
		}
	}
	queue := chunk(asked, command.MaxReconcileSeqs, command.MaxReconcileRanges)
	requests, maxRequests := 0, MaxRequestsPerChunk*len(queue)
	for len(queue) > 0 {
		req := queue[0]
		queue = queue[1:]
		if ctx.Err() != nil {
			sr.noteAll(req, UnexplainedNoAnswer, "reconciliation stopped", o.MaxListed)
			continue
		}
		args := command.ReconcileArgs{SyncedAfter: syncedAfter.UTC()}
		for _, r := range req {
			args.Seqs = append(args.Seqs, command.SeqRange{r.From, r.To})
		}
		rctx, cancel := context.WithTimeout(ctx, o.Timeout)
		res, err := o.Asker.Reconcile(rctx, sr.Store, args)
		cancel()
		requests++
		var re *command.Error
		switch {
		case errors.As(err, &re) && re.Code == command.CodeReplyTooLarge && Count(req) > 1 && requests < maxRequests:
			a, b := halve(req)
			queue = append([][]Range{a, b}, queue...)
		case errors.As(err, &re) && re.Code == command.CodeReplyTooLarge:
			sr.noteAll(req, UnexplainedBadAnswer, "its answers are too large, however small the request", o.MaxListed)
		case errors.As(err, &re) && re.Refused():
			sr.noteAll(req, UnexplainedRefused, re.Code, o.MaxListed)
		case errors.As(err, &re):
			sr.noteAll(req, UnexplainedBadAnswer, "the store failed: "+re.Code, o.MaxListed)
		case errors.Is(err, fleet.ErrNoAgent), errors.Is(err, context.DeadlineExceeded):
			sr.noteAll(req, UnexplainedNoAnswer, "", o.MaxListed)
		case err != nil:
			sr.noteAll(req, UnexplainedBadAnswer, "the answer does not read", o.MaxListed)
		default:
			if why := checkAnswer(req, res); why != "" {
				sr.noteAll(req, UnexplainedBadAnswer, why, o.MaxListed)
				continue
			}
			for _, run := range res.Runs {
				why, reason, ok := judge(run)
				sr.note(Range{run.From, run.To}, why, reason, ok, o.MaxListed)
			}
		}
	}
	sr.noteAll(notAsked, UnexplainedNotAsked, "over the limit of sequences asked per store", o.MaxListed)
}

// judge sorts what a store said of a run of missing sequences.
func judge(run command.SeqRun) (why, reason string, explained bool) {
	switch run.State {
	case command.SeqPending:
		return ExplainedPending, "", true
	case command.SeqQuarantined:
		return ExplainedQuarantined, run.Reason, true
	case command.SeqPurged:
		return ExplainedPurged, run.Reason, true
	case command.SeqSynced:
		if run.Reason == command.SeqRecent {
			return ExplainedInTransit, "synced at the store within the grace of the read", true
		}
		return UnexplainedSynced, "", false
	case command.SeqUnknown:
		if run.Reason == command.SeqPruned {
			return UnexplainedPruned, "", false
		}
		return UnexplainedNotAssigned, "", false
	}
	return UnexplainedBadAnswer, "", false // checkAnswer let no other state through
}

// checkAnswer says what is wrong with a store's answer to the request
// req, or "" when it is well formed: runs in ascending order, each inside
// what was asked, covering every sequence asked once, in a known state,
// with a bounded printable reason, and consistent with the highest
// sequence the store reports.
func checkAnswer(req []Range, res command.ReconcileResult) string {
	var asked Set
	for _, r := range req {
		asked.AddRange(r)
	}
	if len(res.Runs) == 0 || uint64(len(res.Runs)) > asked.Len() {
		return "the answer does not cover the sequences asked"
	}
	var covered, prev uint64
	for _, run := range res.Runs {
		if run.From == 0 || run.From > run.To || run.From <= prev || !asked.ContainsRange(Range{run.From, run.To}) {
			return "the answer names sequences not asked, or out of order"
		}
		prev = run.To
		covered += run.To - run.From + 1
		switch run.State {
		case command.SeqPending:
			if run.Reason != "" {
				return "the answer gives a pending run a reason"
			}
		case command.SeqQuarantined, command.SeqPurged:
		case command.SeqSynced:
			if run.Reason != "" && run.Reason != command.SeqRecent {
				return "the answer gives a synced run an unknown reason"
			}
		case command.SeqUnknown:
			switch {
			case run.Reason == command.SeqPruned && run.To <= res.Highest:
			case run.Reason == command.SeqNotAssigned && run.From > res.Highest:
			default:
				return "the answer's unknown run contradicts its highest sequence"
			}
		default:
			return "the answer has an unknown state"
		}
		if !printable(run.Reason) {
			return "the answer has a reason too long or not printable"
		}
	}
	if covered != asked.Len() {
		return "the answer does not cover the sequences asked"
	}
	return ""
}

func printable(s string) bool {
	if utf8.RuneCountInString(s) > command.MaxReasonRunes || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) })
}

// note counts a run of missing sequences and lists it, as far as
// maxListed allows, merged with the previous one when they touch.
func (s *StoreReport) note(r Range, why, reason string, explained bool, maxListed int) {
	m := &s.Unexplained
	if explained {
		m = &s.Explained
	}
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[why] += r.Len()
	if k := len(s.Gaps) - 1; k >= 0 && s.Gaps[k].To+1 == r.From && s.Gaps[k].Why == why && s.Gaps[k].Reason == reason {
		s.Gaps[k].To = r.To
		return
	}
	if len(s.Gaps) >= maxListed {
		s.MoreGaps++
		return
	}
	s.Gaps = append(s.Gaps, Gap{From: r.From, To: r.To, Why: why, Reason: reason, Explained: explained})
}

func (s *StoreReport) noteAll(req []Range, why, reason string, maxListed int) {
	for _, r := range req {
		s.note(r, why, reason, false, maxListed)
	}
}
