// Package tally reports repeated events, such as refusals, in a volume
// that does not grow with their number. Anyone who can make the agent
// refuse something (a forged command, a connection from a stranger) can
// make it refuse in a loop; what the refusals add to a log or a journal
// must stay bounded however fast the loop runs. So events are counted by
// cause, and each cause is reported at most once per window, with the
// count the report stands for, within a budget per hour.
//
// Tally is the decision, a pure type: the caller passes the time and
// writes the reports it returns. Reporter puts a Tally behind a mutex,
// with a timer that reports what waits once its window has passed.
package tally

import (
	"slices"
	"time"
)

// Report stands for the events of one cause since its last report.
type Report[K comparable, D any] struct {
	Cause K
	// Count is the number of events the report stands for.
	Count int
	// Detail is the latest event's.
	Detail D
	// First and Last are when the first and the latest of them happened.
	First, Last time.Time
	// At is when the report was made.
	At time.Time
}

// Tally counts events by cause and decides which reports are due. It is
// not safe for concurrent use.
type Tally[K comparable, D any] struct {
	window time.Duration
	budget int
	cost   func(Report[K, D]) int

	// maxCauses bounds the causes tracked (0: no bound); fold maps a cause
	// past the bound to the one that stands for the rest.
	maxCauses int
	fold      func(K) K

	causes    map[K]*count[D]
	hourStart time.Time
	spent     int // of budget, since hourStart
	// quiet is when a report may next be due: before it, Due has nothing
	// to do and returns at once, so a flood costs little per event.
	quiet time.Time
	// starved is set when the hour's budget stopped a report: nothing is
	// due until the hour ends.
	starved bool
}

// count is the events of one cause not yet reported.
type count[D any] struct {
	n           int
	detail      D
	first, last time.Time
	reported    time.Time // when this cause was last reported
}

// New returns a tally that reports each cause at most once per window and
// spends at most budget an hour on reports, each costing cost(report) (1
// when cost is nil). Past the budget, events are counted into the next
// hour's first reports.
func New[K comparable, D any](window time.Duration, budget int, cost func(Report[K, D]) int) *Tally[K, D] {
	if cost == nil {
		cost = func(Report[K, D]) int { return 1 }
	}
	return &Tally[K, D]{window: window, budget: budget, cost: cost, causes: map[K]*count[D]{}}
}

// Bound makes t track at most max causes: the events of a new cause past
// that many are counted under fold(cause), which is tracked whatever the
// bound, so fold must map onto few causes. It returns t.
func (t *Tally[K, D]) Bound(max int, fold func(K) K) *Tally[K, D] {
	t.maxCauses, t.fold = max, fold
	return t
}

// Note counts one event of cause c with detail d at now and returns the
// reports due now: this cause's, if its window has passed, within the
// hour's budget.
func (t *Tally[K, D]) Note(c K, d D, now time.Time) []Report[K, D] {
	k := t.causes[c]
	if k == nil && t.maxCauses > 0 && len(t.causes) >= t.maxCauses {
		c = t.fold(c)
		k = t.causes[c]
	}
	if k == nil {
		k = &count[D]{}
		t.causes[c] = k
	}
	if k.n == 0 {
		k.first = now
	}
	k.n++
	k.detail, k.last = d, now
	due := k.reported.Add(t.window)
	if end := t.hourStart.Add(time.Hour); t.starved && due.Before(end) {
		due = end
	}
	if due.Before(t.quiet) {
		t.quiet = due
	}
	return t.Due(now)
}

// Pending reports whether events wait to be reported.
func (t *Tally[K, D]) Pending() bool {
	for _, k := range t.causes {
		if k.n > 0 {
			return true
		}
	}
	return false
}

// Due returns, and forgets, the counts whose window has passed, oldest
// first, as far as the hour's budget allows. Causes with nothing to
// report whose window has passed are dropped: their next event is due at
// once, as it would be if they were kept.
func (t *Tally[K, D]) Due(now time.Time) []Report[K, D] {
	if now.Before(t.quiet) {
		return nil
	}
	if now.Sub(t.hourStart) >= time.Hour {
		t.hourStart, t.spent, t.starved = now, 0, false
	}
	var keys []K
	next := now.Add(t.window)
	for c, k := range t.causes {
		switch {
		case now.Sub(k.reported) < t.window:
			if due := k.reported.Add(t.window); k.n > 0 && due.Before(next) {
				next = due
			}
		case k.n > 0:
			keys = append(keys, c)
		default:
			delete(t.causes, c)
		}
	}
	slices.SortFunc(keys, func(a, b K) int { return t.causes[a].first.Compare(t.causes[b].first) })
	var out []Report[K, D]
	for _, c := range keys {
		r := t.report(c, now)
		size := t.cost(r)
		if t.spent+size > t.budget {
			// The next hour: the oldest waits for it, and the others
			// behind it.
			next, t.starved = t.hourStart.Add(time.Hour), true
			break
		}
		t.spent += size
		t.reset(c, now)
		out = append(out, r)
	}
	t.quiet = next
	return out
}

// Rest returns, and forgets, every count waiting, whatever its window and
// the budget: for the last reports of a component that stops. There are
// at most as many as the causes tracked.
func (t *Tally[K, D]) Rest(now time.Time) []Report[K, D] {
	var keys []K
	for c, k := range t.causes {
		if k.n > 0 {
			keys = append(keys, c)
		}
	}
	slices.SortFunc(keys, func(a, b K) int { return t.causes[a].first.Compare(t.causes[b].first) })
	out := make([]Report[K, D], 0, len(keys))
	for _, c := range keys {
		out = append(out, t.report(c, now))
		t.reset(c, now)
	}
	t.quiet = now.Add(t.window)
	return out
}

func (t *Tally[K, D]) report(c K, now time.Time) Report[K, D] {
	k := t.causes[c]
	return Report[K, D]{Cause: c, Count: k.n, Detail: k.detail, First: k.first, Last: k.last, At: now}
}

func (t *Tally[K, D]) reset(c K, now time.Time) {
	k := t.causes[c]
	var zero D
	k.n, k.detail, k.reported = 0, zero, now
}
