package dlq

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rxedge/agent/queue"
)

// AuditFilter selects journal events. The zero AuditFilter selects all.
type AuditFilter struct {
	// Since (inclusive) and Until (exclusive) bound the event time; a zero
	// time is no bound.
	Since, Until time.Time
	// Actions keeps events of these actions (queue.ActionRedrive, ...);
	// empty keeps every action.
	Actions []string
	// Key keeps events that name a key starting with Key (a whole key or
	// its start; case ignored); empty keeps every event.
	Key string
	// Actor keeps events whose actor contains Actor, case ignored:
	// "alice" matches local:alice and remote:alice (U…).
	Actor string
}

// AuditResult is what Audit answers.
type AuditResult struct {
	// Events are oldest first. They hold keys, never payloads.
	Events []queue.Event `json:"events"`
}

// Audit returns the journal events that match f, oldest first.
func (s *Service) Audit(f AuditFilter) (AuditResult, error) {
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return AuditResult{}, InputErrorf("audit", "since", "--since", "must be before until (--until)")
	}
	actions := make([]string, 0, len(f.Actions))
	for _, a := range f.Actions {
		if a = strings.ToLower(strings.TrimSpace(a)); a == "" {
			continue
		}
		if !slices.Contains(queue.Actions, a) {
			return AuditResult{}, InputErrorf("audit", "action", "--action", "%q is not an action; the actions are %s", a, strings.Join(queue.Actions, ", "))
		}
		actions = append(actions, a)
	}
	actor := strings.ToLower(strings.TrimSpace(f.Actor))
	key := strings.ToLower(strings.TrimSpace(f.Key))
	if key != "" && strings.Trim(key, "0123456789abcdef") != "" {
		return AuditResult{}, InputErrorf("audit", "key", "--key", "%q is not a key or the start of one (hexadecimal characters)", clip(f.Key))
	}
	res := AuditResult{Events: []queue.Event{}}
	err := s.q.Events(f.Since, func(e queue.Event) bool {
		// Not a stop: the journal is in append order, which a wall clock
		// set back can make differ from time order.
		if !f.Until.IsZero() && !e.At.Before(f.Until) {
			return true
		}
		if len(actions) > 0 && !slices.Contains(actions, e.Action) {
			return true
		}
		if actor != "" && !strings.Contains(strings.ToLower(e.Actor), actor) {
			return true
		}
		if key != "" && !slices.ContainsFunc(e.Keys, func(k string) bool { return strings.HasPrefix(k, key) }) {
			return true
		}
		res.Events = append(res.Events, e)
		return true
	})
	if err != nil {
		return AuditResult{}, fmt.Errorf("dlq: audit: %w", err)
	}
	return res, nil
}
