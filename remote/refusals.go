package remote

import (
	"encoding/json"
	"time"

	"github.com/rxedge/agent/internal/tally"
	"github.com/rxedge/agent/queue"
)

// Limits of the refusal journal: anyone who can put a message on a
// store's control subjects can make it refuse, so refusals are journalled
// in aggregate.
const (
	// RefusalWindow is how often one cause of refusal is journalled at
	// most: one event per cause per window, counting the refusals it
	// stands for.
	RefusalWindow = time.Minute
	// RefusalBytesPerHour bounds the journal bytes (event JSON) that
	// refusals add in an hour, whatever the flood: past it, refusals are
	// counted and journalled in the next hour's first events.
	RefusalBytesPerHour = 4 << 10
)

// cause groups refusals journalled together. actor is ActorUnverified,
// ActorUnsigned or remote:<a verified operator key>, so the causes are
// bounded by the refusal codes times the operator keys plus two.
type cause struct {
	code, reason, actor string
}

// report is a tally's report of refusals of one cause; its detail is the
// command of the latest.
type report = tally.Report[cause, string]

// refusalLog decides which refusals are journalled (see tally.Tally: a
// pure type; the caller passes the time and writes the events it
// returns). It is not safe for concurrent use.
type refusalLog struct {
	t *tally.Tally[cause, string]
}

func newRefusalLog() *refusalLog {
	return &refusalLog{t: tally.New(RefusalWindow, RefusalBytesPerHour, eventBytes)}
}

// note counts one refusal and returns the events due now: this cause's,
// if its window has passed, within the hour's budget.
func (l *refusalLog) note(c cause, cmd string, now time.Time) []queue.Event {
	return events(l.t.Note(c, cmd, now))
}

// pending reports whether refusals wait to be journalled.
func (l *refusalLog) pending() bool { return l.t.Pending() }

// due returns, and forgets, the tallies whose window has passed, as
// events, as far as the hour's budget allows.
func (l *refusalLog) due(now time.Time) []queue.Event { return events(l.t.Due(now)) }

// event is the journal event of a report.
func event(r report) queue.Event {
	return queue.Event{
		At: r.At, Action: queue.ActionRefused, Actor: r.Cause.actor, Reason: r.Cause.reason, Count: r.Count,
		Detail: map[string]string{"code": r.Cause.code, "cmd": r.Detail,
			"first": r.First.UTC().Format(time.RFC3339), "last": r.Last.UTC().Format(time.RFC3339)},
	}
}

// eventBytes is what a report costs of the hour's budget: its event's
// JSON and the sequence number the journal adds.
func eventBytes(r report) int {
	b, _ := json.Marshal(event(r))
	return len(b) + 20
}

func events(rs []report) []queue.Event {
	var out []queue.Event
	for _, r := range rs {
		out = append(out, event(r))
	}
	return out
}
