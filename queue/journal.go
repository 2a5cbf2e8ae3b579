package queue

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Journal actions.
const (
	ActionQuarantine = "quarantine"
	ActionRedrive    = "redrive"
	ActionPurge      = "purge"
	ActionExport     = "export"
	ActionStart      = "start"   // the agent started, with a summary of its configuration
	ActionRefused    = "refused" // a remote command was refused
	ActionCompact    = "compact"
	ActionRemote     = "remote" // a signed remote command was accepted
	ActionView       = "view"   // an operator was shown a movement's payload
)

// Actions lists every journal action.
var Actions = []string{ActionQuarantine, ActionRedrive, ActionPurge, ActionExport, ActionStart, ActionRefused, ActionCompact, ActionRemote, ActionView}

// ActorAgent is the actor of the agent's own decisions.
const ActorAgent = "agent"

// Event is one audit journal entry (DESIGN P8): what was done, by whom,
// when, why, and to which keys. It never holds payload data.
type Event struct {
	Seq    uint64            `json:"seq"`
	At     time.Time         `json:"at"`
	Action string            `json:"action"`
	Actor  string            `json:"actor"`
	Reason string            `json:"reason,omitempty"`
	Keys   []string          `json:"keys,omitempty"`
	Count  int               `json:"count"`
	Part   string            `json:"part,omitempty"` // "i/n" when one action's keys span several events
	Detail map[string]string `json:"detail,omitempty"`
}

// maxKeysPerEvent splits the journal entry of a large action into parts.
const maxKeysPerEvent = 1000

// Journal appends an event to the audit journal, durably.
func (q *Queue) Journal(ev Event) error {
	if ev.At.IsZero() {
		ev.At = q.opts.Clock()
	}
	return q.do(&op{apply: func(tx *bolt.Tx) error { return appendEvents(tx, ev) }})
}

// JournalWhole appends ev as one entry, however many keys it names: one
// operator action that is one act (an export) is one journal entry.
func (q *Queue) JournalWhole(ev Event) error {
	if ev.At.IsZero() {
		ev.At = q.opts.Clock()
	}
	ev.Count = len(ev.Keys)
	return q.do(&op{apply: func(tx *bolt.Tx) error { return appendEvent(tx, ev) }})
}

func appendEvent(tx *bolt.Tx, e Event) error {
	b := tx.Bucket(bucketJournal)
	b.FillPercent = 1.0 // appended in sequence order
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	e.Seq = seq
	e.At = e.At.UTC()
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return b.Put(u64(seq), v)
}

// appendEvents writes ev, split into parts of at most maxKeysPerEvent keys.
func appendEvents(tx *bolt.Tx, ev Event) error {
	keys := ev.Keys
	parts := (len(keys) + maxKeysPerEvent - 1) / maxKeysPerEvent
	if parts == 0 {
		parts = 1
	}
	for p := 0; p < parts; p++ {
		e := ev
		if len(keys) > 0 {
			lo, hi := p*maxKeysPerEvent, min((p+1)*maxKeysPerEvent, len(keys))
			e.Keys = keys[lo:hi]
			e.Count = len(e.Keys)
		}
		if parts > 1 {
			e.Part = fmt.Sprintf("%d/%d", p+1, parts)
		}
		if err := appendEvent(tx, e); err != nil {
			return err
		}
	}
	return nil
}

// Events calls fn for each journal event at or after since, oldest first,
// until fn returns false. Events are appended in time order, so it reads
// back from the newest only as far as since: reading the last minutes of
// a two-year journal costs the minutes, not the years.
func (q *Queue) Events(since time.Time, fn func(Event) bool) error {
	return q.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketJournal).Cursor()
		k, v := c.First()
		if !since.IsZero() {
			for k, v = c.Last(); k != nil; k, v = c.Prev() {
				var e struct{ At time.Time }
				if err := json.Unmarshal(v, &e); err != nil || e.At.Before(since) {
					break
				}
			}
			if k == nil {
				k, v = c.First()
			}
		}
		for ; k != nil; k, v = c.Next() {
			var e Event
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("queue: journal entry %d: %w", binary.BigEndian.Uint64(k), err)
			}
			if e.At.Before(since) {
				continue
			}
			if !fn(e) {
				return nil
			}
		}
		return nil
	})
}
