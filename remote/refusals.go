package remote

import (
	"encoding/json"
	"sort"
	"time"

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

// tally is the refusals of one cause not yet journalled.
type tally struct {
	count       int
	cmd         string // of the latest
	first, last time.Time
	journalled  time.Time // when this cause last had an event
}

// refusalLog decides which refusals are journalled (a pure type: the
// caller passes the time and writes the events it returns). It is not
// safe for concurrent use.
type refusalLog struct {
	causes    map[cause]*tally
	hourStart time.Time
	spent     int // event bytes since hourStart
}

func newRefusalLog() *refusalLog { return &refusalLog{causes: map[cause]*tally{}} }

// note counts one refusal and returns the events due now: this cause's,
// if its window has passed, within the hour's budget.
func (l *refusalLog) note(c cause, cmd string, now time.Time) []queue.Event {
	t := l.causes[c]
	if t == nil {
		t = &tally{}
		l.causes[c] = t
	}
	if t.count == 0 {
		t.first = now
	}
	t.count++
	t.cmd, t.last = cmd, now
	return l.due(now)
}

// pending reports whether refusals wait to be journalled.
func (l *refusalLog) pending() bool {
	for _, t := range l.causes {
		if t.count > 0 {
			return true
		}
	}
	return false
}

// due returns, and forgets, the tallies whose window has passed, as
// events, as far as the hour's budget allows.
func (l *refusalLog) due(now time.Time) []queue.Event {
	if now.Sub(l.hourStart) >= time.Hour {
		l.hourStart, l.spent = now, 0
	}
	keys := make([]cause, 0, len(l.causes))
	for c, t := range l.causes {
		if t.count > 0 && now.Sub(t.journalled) >= RefusalWindow {
			keys = append(keys, c)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return l.causes[keys[i]].first.Before(l.causes[keys[j]].first) })
	var out []queue.Event
	for _, c := range keys {
		t := l.causes[c]
		ev := queue.Event{
			At: now, Action: queue.ActionRefused, Actor: c.actor, Reason: c.reason, Count: t.count,
			Detail: map[string]string{"code": c.code, "cmd": t.cmd,
				"first": t.first.UTC().Format(time.RFC3339), "last": t.last.UTC().Format(time.RFC3339)},
		}
		b, _ := json.Marshal(ev)
		size := len(b) + 20 // the sequence number the journal adds
		if l.spent+size > RefusalBytesPerHour {
			break // the next hour
		}
		l.spent += size
		t.count, t.journalled = 0, now
		out = append(out, ev)
	}
	return out
}
