package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// Selection says which quarantined movements an operation applies to
// (command.Selection, as a remote redrive sends it).
type Selection = command.Selection

// Missing is a selected key that is not quarantined (command.Missing).
type Missing = command.Missing

func normalizeSelection(sel Selection, op string) (Selection, error) {
	modes := 0
	if len(sel.Keys) > 0 {
		modes++
	}
	if sel.All {
		modes++
	}
	if sel.Reason != "" || sel.Oldest != 0 {
		modes++
	}
	switch {
	case modes == 0:
		return sel, InputErrorf(op, "selection", "", "is empty: give keys (KEY…), all (--all), reason (--reason KIND) or oldest (--oldest N)")
	case modes > 1:
		return sel, InputErrorf(op, "selection", "", "is ambiguous: give keys (KEY…), or all (--all), or reason (--reason) and/or oldest (--oldest), not several")
	case sel.Oldest < 0:
		return sel, InputErrorf(op, "oldest", "--oldest", "must be a positive number of movements")
	}
	f, err := normalizeFilter(Filter{Reason: sel.Reason}, op)
	sel.Reason = f.Reason
	return sel, err
}

// describe is the selection as recorded in the journal (keys are recorded
// on their own).
func describeSelection(sel Selection) string {
	switch {
	case len(sel.Keys) > 0:
		return "keys"
	case sel.All:
		return "all"
	}
	var parts []string
	if sel.Reason != "" {
		parts = append(parts, "reason="+sel.Reason)
	}
	if sel.Oldest > 0 {
		parts = append(parts, "oldest="+strconv.Itoa(sel.Oldest))
	}
	return strings.Join(parts, ",")
}

// target is one selected quarantined movement.
type target struct {
	key    [16]byte
	reason string
}

// resolve turns a normalized selection into the quarantined movements it
// names, in order (oldest first for a filter, as given for keys), and the
// given keys that are not quarantined.
func (s *Service) resolve(op string, sel Selection) ([]target, []Missing, error) {
	if len(sel.Keys) == 0 {
		recs, _, err := s.scan(Filter{Reason: sel.Reason, Limit: sel.Oldest})
		if err != nil {
			return nil, nil, fmt.Errorf("dlq: %s: %w", op, err)
		}
		out := make([]target, len(recs))
		for i, r := range recs {
			out[i] = target{key: r.Key, reason: r.Quarantine.Reason}
		}
		return out, nil, nil
	}
	keys, err := parseKeys(op, sel.Keys)
	if err != nil {
		return nil, nil, err
	}
	var out []target
	var missing []Missing
	seen := make(map[[16]byte]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		e, err := s.q.Get(k)
		switch {
		case errors.Is(err, queue.ErrNotFound):
			missing = append(missing, Missing{Key: keyString(k), State: StateUnknown})
		case err != nil:
			return nil, nil, fmt.Errorf("dlq: %s: %w", op, err)
		case e.State != queue.Quarantined || e.Record == nil || e.Record.Quarantine == nil:
			missing = append(missing, Missing{Key: keyString(k), State: e.State.String()})
		default:
			out = append(out, target{key: k, reason: e.Record.Quarantine.Reason})
		}
	}
	return out, missing, nil
}

// RedriveRequest asks for quarantined movements to be sent again.
type RedriveRequest struct {
	Selection
	// Actor is who asks: "local:<OS user>" from the control socket,
	// "remote:<operator public key>" from a remote command.
	Actor string
	// OnBehalfOf is the person a remote operator key signed for (a
	// head-office console's user, command.RedriveArgs.Actor); it is
	// journalled as DetailOnBehalfOf beside Actor.
	OnBehalfOf string
	// ReasonText is why; required (except in a dry run), recorded in the
	// journal.
	ReasonText string
	// Spread gives each movement a due time uniform over [now, now+Spread),
	// at most MaxSpread; zero makes them all due now.
	Spread time.Duration
	// DryRun selects and reports without changing anything.
	DryRun bool
	// Progress, when set, is called after each committed chunk with the
	// number of movements done and the number selected.
	Progress func(done, total int)
}

// RedriveResult says what a redrive did, or in a dry run would do.
type RedriveResult struct {
	DryRun bool `json:"dry_run,omitempty"`
	// Redriven are the movements put back to pending (in a dry run: those
	// that would be), in the order of the selection.
	Redriven []Redriven `json:"redriven"`
	// NotFound are selected keys that were not quarantined.
	NotFound []Missing `json:"not_found,omitempty"`
	// Guidance says what to do instead, for movements a redrive cannot
	// deliver (a conflict is quarantined again at once).
	Guidance []string `json:"guidance,omitempty"`
}

// DetailOnBehalfOf is the journal detail that names the person a remote
// operator key signed for.
const DetailOnBehalfOf = "on_behalf_of"

// ReasonConflict is the quarantine reason of a movement central holds
// another movement under the key of.
const ReasonConflict = "permanent:conflict"

// conflictGuidance is what to do about n movements quarantined for a
// conflict.
func conflictGuidance(n int) string {
	return fmt.Sprintf("%d of these movement(s) were quarantined for a conflict (%s): central holds a different movement under the same key, because the same movement_id was sent with other content. A redrive sends the same content again and it is quarantined again at once. Compare it (`agent dlq show KEY --payload`) with central's copy, have the source system send the corrected movement under a new movement_id, then export and purge this one (`agent dlq purge KEY --reason-text WHY`).", n, ReasonConflict)
}

func (r *RedriveResult) guide() {
	n := 0
	for _, m := range r.Redriven {
		if m.Reason == ReasonConflict {
			n++
		}
	}
	if n > 0 {
		r.Guidance = append(r.Guidance, conflictGuidance(n))
	}
}

// Progress counts the movements done of those selected.
type Progress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// Redriven is one movement sent again.
type Redriven struct {
	Key    string     `json:"key"`
	Reason string     `json:"reason"`           // the quarantine reason it had
	DueAt  *time.Time `json:"due_at,omitempty"` // absent in a dry run
}

// Redrive moves the selected quarantined movements back to pending with
// their attempts reset, in transactions of at most 1000 movements, each
// journalled by the queue with the actor, the reason text, the selection
// and its keys. Keys that are not quarantined are reported in NotFound, not
// as an error; keys that are not keys are an *InputError and nothing is
// done. When ctx ends between chunks, Redrive stops and returns what was
// done with the error.
func (s *Service) Redrive(ctx context.Context, rq RedriveRequest) (RedriveResult, error) {
	res, err := s.redrive(ctx, rq)
	res.guide()
	return res, err
}

func (s *Service) redrive(ctx context.Context, rq RedriveRequest) (RedriveResult, error) {
	const op = "redrive"
	res := RedriveResult{DryRun: rq.DryRun, Redriven: []Redriven{}}
	sel, err := normalizeSelection(rq.Selection, op)
	if err != nil {
		return res, err
	}
	reasonText := strings.TrimSpace(rq.ReasonText)
	switch {
	case reasonText == "" && !rq.DryRun:
		return res, InputErrorf(op, "reason_text", "--reason-text", "is required: say why the movements are sent again (it is recorded in the audit journal)")
	case rq.Spread < 0:
		return res, InputErrorf(op, "spread", "--spread", "must not be negative")
	case rq.Spread > MaxSpread:
		return res, InputErrorf(op, "spread", "--spread", "%s is longer than the largest spread, %s", rq.Spread, MaxSpread)
	}
	// The same references as show: a key, a key prefix or a movement_id.
	if len(sel.Keys) > 0 {
		if sel.Keys, err = s.findKeys(op, sel.Keys); err != nil {
			return res, err
		}
	}
	targets, missing, err := s.resolve(op, sel)
	if err != nil {
		return res, err
	}
	res.NotFound = missing
	if rq.DryRun {
		for _, t := range targets {
			res.Redriven = append(res.Redriven, Redriven{Key: keyString(t.key), Reason: t.reason})
		}
		return res, nil
	}

	detail := map[string]string{"selection": describeSelection(sel)}
	if rq.OnBehalfOf != "" {
		detail[DetailOnBehalfOf] = rq.OnBehalfOf
	}
	if rq.Spread > 0 {
		detail["spread"] = rq.Spread.String()
	}
	total := len(targets)
	chunks := (total + s.chunk - 1) / s.chunk
	for i := 0; i < chunks; i++ {
		done := len(res.Redriven)
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("dlq: redrive: stopped after %d of %d movements: %w", done, total, err)
		}
		part := targets[i*s.chunk : min((i+1)*s.chunk, total)]
		keys := make([][16]byte, len(part))
		reasons := make(map[[16]byte]string, len(part))
		for j, t := range part {
			keys[j] = t.key
			reasons[t.key] = t.reason
		}
		d := detail
		if chunks > 1 {
			d = make(map[string]string, len(detail)+1)
			for k, v := range detail {
				d[k] = v
			}
			d["batch"] = fmt.Sprintf("%d/%d", i+1, chunks)
		}
		qr, err := s.q.Redrive(queue.Redrive{Keys: keys, Actor: actorOr(rq.Actor), Reason: reasonText, Spread: rq.Spread, Rand: s.rand, Detail: d})
		if err != nil {
			return res, fmt.Errorf("dlq: redrive: %d of %d movements were redriven before this failed: %w", done, total, err)
		}
		for _, r := range qr.Redriven {
			due := r.DueAt.UTC()
			res.Redriven = append(res.Redriven, Redriven{Key: keyString(r.Key), Reason: reasons[r.Key], DueAt: &due})
		}
		for _, k := range qr.NotFound {
			res.NotFound = append(res.NotFound, Missing{Key: keyString(k), State: s.stateOf(k)})
		}
		if rq.Progress != nil {
			rq.Progress(min((i+1)*s.chunk, total), total)
		}
	}
	return res, nil
}

// DefaultActor is recorded when a request does not say who made it.
const DefaultActor = "local:unknown"

// actorOr returns the actor, or DefaultActor when there is none. Control
// characters are replaced and the length bounded, so that the journal
// holds one readable line per actor.
func actorOr(a string) string {
	a = strings.TrimSpace(a)
	if a == "" {
		return DefaultActor
	}
	a = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, a)
	if r := []rune(a); len(r) > 200 {
		a = string(r[:200])
	}
	return a
}

// findKeys turns each reference that is not a whole key into the key of
// the quarantined movement it names, as show does (a key prefix of at
// least MinKeyPrefix characters, or a movement_id). A reference that is
// ambiguous or names no quarantined movement refuses the request: nothing
// is done.
func (s *Service) findKeys(op string, refs []string) ([]string, error) {
	out := make([]string, 0, len(refs))
	for _, ref := range refs {
		if _, ok := movement.ParseKey(strings.ToLower(strings.TrimSpace(ref))); ok {
			out = append(out, ref)
			continue
		}
		k, err := s.find(op, ref)
		var ke *KeyError
		if errors.As(err, &ke) {
			return nil, &InputError{Op: op, Field: "keys", Flag: "KEY", Msg: fmt.Sprintf("%q is not a movement key, and %s (see `agent dlq list`)", clip(ref), ke.Msg)}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}
