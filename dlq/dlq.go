package dlq

import (
	"cmp"
	"container/heap"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// Service performs quarantine operations on one queue.
type Service struct {
	q *queue.Queue
	// clock resolves relative times ("24h" ago) and names purge files.
	// The queue stamps the times of its own transactions.
	clock func() time.Time
	// rand is the spread's random source, uniform in [0, 1).
	rand func() float64
	// chunk is how many keys one redrive or purge transaction holds.
	chunk int
}

// Options tune a Service. Zero values take the defaults.
type Options struct {
	// Chunk is how many keys one redrive or purge transaction holds.
	// Default DefaultChunk.
	Chunk int
}

// New returns a Service over q with the default options.
func New(q *queue.Queue) *Service { return NewWithOptions(q, Options{}) }

// NewWithOptions returns a Service over q.
func NewWithOptions(q *queue.Queue, opts Options) *Service {
	if opts.Chunk <= 0 {
		opts.Chunk = DefaultChunk
	}
	return &Service{q: q, clock: time.Now, rand: rand.Float64, chunk: opts.Chunk}
}

// DefaultChunk bounds one redrive or purge transaction: a large selection
// is committed as several, so the writer is never held long and other
// submissions keep flowing.
const DefaultChunk = 1000

// MaxSpread bounds a redrive's spread (command.MaxSpread, which a remote
// redrive is held to as well).
const MaxSpread = command.MaxSpread

// ErrNotQuarantined is matched (errors.Is) by a *KeyError: the key is not in
// the quarantine.
var ErrNotQuarantined = errors.New("dlq: not quarantined")

// InputError is a request refused as given, before anything was done. It
// names the field of the API and, where one exists, the CLI flag.
type InputError struct {
	Op    string // "list", "redrive", ...
	Field string // the API field or query parameter
	Flag  string // the CLI flag or argument, "" when the field has none
	Msg   string // the whole message, naming the field
}

func (e *InputError) Error() string { return "dlq: " + e.Op + ": " + e.Msg }

// InputErrorf returns an *InputError whose message starts with the
// field's name, e.g. "reason_text (--reason-text) is required".
func InputErrorf(op, field, flag, format string, args ...any) error {
	name := field
	if flag != "" && flag != field {
		name += " (" + flag + ")"
	}
	return &InputError{Op: op, Field: field, Flag: flag, Msg: name + " " + fmt.Sprintf(format, args...)}
}

// KeyError says that a key is not in the quarantine, and where it is.
type KeyError struct {
	Key   string
	State string // see Missing.State
	Msg   string // the whole message, when the key was looked up by a reference
}

func (e *KeyError) Error() string {
	if e.Msg != "" {
		return "dlq: " + e.Msg
	}
	if e.State == StateUnknown {
		return fmt.Sprintf("dlq: key %s: this agent holds no such movement", e.Key)
	}
	return fmt.Sprintf("dlq: key %s is %s, not quarantined", e.Key, e.State)
}

// Unwrap makes a KeyError match ErrNotQuarantined.
func (e *KeyError) Unwrap() error { return ErrNotQuarantined }

// StateUnknown is the state reported for a key the agent does not hold
// (command.StateUnknown).
const StateUnknown = command.StateUnknown

// Filter selects quarantined movements (command.ListArgs, as dlq.list
// sends it). The zero Filter selects all; over NATS the responder gives a
// zero Limit command.DefaultListLimit.
type Filter = command.ListArgs

// Item is one quarantined movement with its failure context, without its
// payload: the remote commands' type (command.Item), one definition for
// both ends.
type Item = command.Item

// ListResult is what List answers (command.ListResult).
type ListResult = command.ListResult

// Detail is one quarantined movement in full: its Item, the store it
// belongs to, its digest and, when asked for, its payload. Export writes
// one Detail per line.
type Detail struct {
	Item
	StoreID string `json:"store_id"`
	Digest  string `json:"digest"`
	// Payload is the canonical movement. It holds patient data: only Show
	// with withPayload and exports carry it.
	Payload json.RawMessage `json:"payload,omitempty"`
}

func itemOf(r *queue.Record) Item {
	it := Item{
		Key:        r.KeyString(),
		MovementID: r.MovementID,
		Class:      r.Class.String(),
		Schedule:   r.Schedule,
		Seq:        r.Seq,
		ErrorKind:  r.LastErrKind,
		ErrorText:  r.LastErrText,
		Attempts:   r.Attempts,
		EnqueuedAt: r.EnqueuedAt.UTC(),
	}
	if !r.FirstFailure.IsZero() {
		t := r.FirstFailure.UTC()
		it.FirstFailure = &t
	}
	if !r.LastFailure.IsZero() {
		t := r.LastFailure.UTC()
		it.LastFailure = &t
	}
	for _, d := range r.Delays {
		it.DelaysWaitedMS = append(it.DelaysWaitedMS, d.Milliseconds())
	}
	if qi := r.Quarantine; qi != nil {
		it.Reason = qi.Reason
		it.QuarantinedAt = qi.At.UTC()
		it.ConnState = qi.ConnState
		it.AgentVersion = qi.AgentVersion
	}
	return it
}

func (s *Service) detailOf(r *queue.Record, storeID string, withPayload bool) Detail {
	d := Detail{Item: itemOf(r), StoreID: storeID, Digest: hex.EncodeToString(r.Digest[:])}
	if withPayload {
		d.Payload = json.RawMessage(r.Payload)
	}
	return d
}

// normalizeFilter checks a filter and brings its reason to lower case.
func normalizeFilter(f Filter, op string) (Filter, error) {
	f.Reason = strings.ToLower(strings.TrimSpace(f.Reason))
	if f.Reason != "" && !validReason(f.Reason) {
		return f, InputErrorf(op, "reason", "--reason", "%q is not a reason: use a class (permanent, exhausted), a kind (e.g. too_large) or both (permanent:too_large)", clip(f.Reason))
	}
	if f.Limit < 0 {
		return f, InputErrorf(op, "limit", "--limit", "must not be negative")
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, InputErrorf(op, "since", "--since", "must be before until (--until)")
	}
	return f, nil
}

func validReason(s string) bool {
	if s == "" || s == ":" || strings.HasPrefix(s, ":") {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == ':' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// reasonClasses are the classes of a quarantine reason.
var reasonClasses = []string{"permanent", "exhausted"}

// matchReason applies a normalized Filter.Reason to a quarantine reason.
func matchReason(filter, reason string) bool {
	if filter == "" {
		return true
	}
	reason = strings.ToLower(reason)
	class, kind, _ := strings.Cut(reason, ":")
	fc, fk, _ := strings.Cut(filter, ":")
	if slices.Contains(reasonClasses, fc) {
		if fk == "" {
			return class == fc
		}
		return reason == filter
	}
	return kind == filter
}

func matchFilter(f Filter, r *queue.Record) bool {
	if r.Quarantine == nil {
		return false
	}
	at := r.Quarantine.At
	if !f.Since.IsZero() && at.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !at.Before(f.Until) {
		return false
	}
	return matchReason(f.Reason, r.Quarantine.Reason)
}

// older orders quarantined movements by quarantine time, then sequence.
func older(a, b *queue.Record) int {
	if c := a.Quarantine.At.Compare(b.Quarantine.At); c != 0 {
		return c
	}
	return cmp.Compare(a.Seq, b.Seq)
}

// youngestFirst is a max-heap of records by age: its top is the youngest
// kept, the one to drop when a limit is exceeded.
type youngestFirst []*queue.Record

func (h youngestFirst) Len() int           { return len(h) }
func (h youngestFirst) Less(i, j int) bool { return older(h[i], h[j]) > 0 }
func (h youngestFirst) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *youngestFirst) Push(x any)        { *h = append(*h, x.(*queue.Record)) }
func (h *youngestFirst) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}

// scan returns the quarantined movements that match f, oldest first, at
// most f.Limit of them when it is set, and the number that matched. The
// records come without their payloads; with a limit only that many are kept
// in memory.
func (s *Service) scan(f Filter) ([]*queue.Record, int, error) {
	var keep youngestFirst
	matched := 0
	err := s.q.ForEachQuarantined(func(r *queue.Record) bool {
		if !matchFilter(f, r) {
			return true
		}
		matched++
		r.Payload = nil // never needed from a scan; Export reads it again key by key
		if f.Limit == 0 {
			keep = append(keep, r)
			return true
		}
		if len(keep) < f.Limit {
			heap.Push(&keep, r)
		} else if older(r, keep[0]) < 0 {
			keep[0] = r
			heap.Fix(&keep, 0)
		}
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	out := []*queue.Record(keep)
	slices.SortFunc(out, older)
	return out, matched, nil
}

// List returns the quarantined movements that match f, oldest first,
// without payloads.
func (s *Service) List(f Filter) (ListResult, error) {
	f, err := normalizeFilter(f, "list")
	if err != nil {
		return ListResult{}, err
	}
	recs, matched, err := s.scan(f)
	if err != nil {
		return ListResult{}, fmt.Errorf("dlq: list: %w", err)
	}
	res := ListResult{Items: make([]Item, len(recs)), Matched: matched}
	for i, r := range recs {
		res.Items[i] = itemOf(r)
	}
	return res, nil
}

// Show returns one quarantined movement with its whole failure context;
// the payload only when withPayload is set. A key that is not quarantined
// is a *KeyError, a key that is not a key an *InputError.
//
// A payload is shown only after its viewing is recorded in the audit
// journal with actor (DESIGN P8: access to the records is auditable); on a
// file opened read-only, or when the journal cannot be written, the
// payload is refused.
//
// ref is a key, or a quarantined movement's movement_id, or the start of
// its key (at least 4 hexadecimal characters) that no other quarantined
// movement's key starts with.
func (s *Service) Show(ref string, withPayload bool, actor string) (Detail, error) {
	key, err := s.Find(ref)
	if err != nil {
		return Detail{}, err
	}
	keys, err := parseKeys("show", []string{key})
	if err != nil {
		return Detail{}, err
	}
	e, err := s.q.Get(keys[0])
	if errors.Is(err, queue.ErrNotFound) {
		return Detail{}, &KeyError{Key: keyString(keys[0]), State: StateUnknown}
	}
	if err != nil {
		return Detail{}, fmt.Errorf("dlq: show: %w", err)
	}
	if e.State != queue.Quarantined || e.Record == nil {
		return Detail{}, &KeyError{Key: keyString(keys[0]), State: e.State.String()}
	}
	if withPayload {
		err := s.q.Journal(queue.Event{Action: queue.ActionView, Actor: actorOr(actor), Reason: "payload shown", Keys: []string{keyString(keys[0])}})
		if errors.Is(err, queue.ErrReadOnly) {
			return Detail{}, &InputError{Field: "payload", Op: "show", Flag: "--payload", Msg: "showing a payload is recorded in the audit journal, which a read-only file cannot take: run the command so it can open the data file for writing (the agent running, or as its user)"}
		}
		if err != nil {
			return Detail{}, fmt.Errorf("dlq: show: recording the access in the journal: %w", err)
		}
	}
	return s.detailOf(e.Record, s.q.StoreID(), withPayload), nil
}

// MinKeyPrefix is the shortest key prefix Find takes.
const MinKeyPrefix = 4

// Find turns ref into a key: a whole key as it is; otherwise the key of
// the quarantined movement whose movement_id is ref, or else whose key
// starts with ref. No match is a *KeyError; several an *InputError that
// says how many.
func (s *Service) Find(ref string) (string, error) { return s.find("show", ref) }

func (s *Service) find(op, ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	if _, ok := movement.ParseKey(strings.ToLower(ref)); ok {
		return strings.ToLower(ref), nil
	}
	if ref == "" {
		return "", InputErrorf(op, "key", "KEY", "is required: a key, a key prefix or a movement_id (see `agent dlq list`)")
	}
	prefix := strings.ToLower(ref)
	isPrefix := len(prefix) >= MinKeyPrefix && len(prefix) < 32 && strings.Trim(prefix, "0123456789abcdef") == ""
	var byID, byPrefix []string
	err := s.q.ForEachQuarantined(func(r *queue.Record) bool {
		k := r.KeyString()
		if r.MovementID == ref {
			byID = append(byID, k)
		} else if isPrefix && strings.HasPrefix(k, prefix) {
			byPrefix = append(byPrefix, k)
		}
		return true
	})
	if err != nil {
		return "", fmt.Errorf("dlq: %s: %w", op, err)
	}
	switch {
	case len(byID) == 1:
		return byID[0], nil
	case len(byID) > 1:
		return "", &InputError{Op: op, Field: "key", Flag: "KEY", Msg: fmt.Sprintf("%d quarantined movements have the movement_id %q: give the key instead (see `agent dlq list`)", len(byID), clip(ref))}
	case len(byPrefix) == 1:
		return byPrefix[0], nil
	case len(byPrefix) > 1:
		return "", &InputError{Op: op, Field: "key", Flag: "KEY", Msg: fmt.Sprintf("%q is ambiguous: the keys of %d quarantined movements start with it; give more of the key", clip(ref), len(byPrefix))}
	}
	what := "no quarantined movement has the movement_id " + strconv.Quote(clip(ref))
	if isPrefix {
		what += " or a key starting with it"
	} else if len(prefix) < MinKeyPrefix && strings.Trim(prefix, "0123456789abcdef") == "" {
		what += fmt.Sprintf(" (a key prefix needs at least %d characters)", MinKeyPrefix)
	}
	return "", &KeyError{Key: clip(ref), State: StateUnknown, Msg: what}
}

// Summary counts quarantined movements by reason and class.
type Summary struct {
	Total   ClassCount    `json:"total"`
	Reasons []ReasonCount `json:"reasons"` // most movements first
}

// ClassCount is a count split by class.
type ClassCount struct {
	Controlled int `json:"controlled"`
	Ordinary   int `json:"ordinary"`
	Total      int `json:"total"`
}

// ReasonCount is the count of one quarantine reason.
type ReasonCount struct {
	Reason string `json:"reason"`
	ClassCount
}

func (c *ClassCount) add(class movement.Class) {
	c.Total++
	if class == movement.Controlled {
		c.Controlled++
	} else {
		c.Ordinary++
	}
}

// Summarize counts the quarantined movements that match f (its Limit is
// ignored) by reason and class, in one scan without payloads.
func (s *Service) Summarize(f Filter) (Summary, error) {
	f.Limit = 0
	f, err := normalizeFilter(f, "list")
	if err != nil {
		return Summary{}, err
	}
	by := map[string]*ReasonCount{}
	var sum Summary
	err = s.q.ForEachQuarantined(func(r *queue.Record) bool {
		if !matchFilter(f, r) {
			return true
		}
		reason := ""
		if r.Quarantine != nil {
			reason = r.Quarantine.Reason
		}
		rc := by[reason]
		if rc == nil {
			rc = &ReasonCount{Reason: reason}
			by[reason] = rc
		}
		rc.add(r.Class)
		sum.Total.add(r.Class)
		return true
	})
	if err != nil {
		return Summary{}, fmt.Errorf("dlq: list: %w", err)
	}
	sum.Reasons = []ReasonCount{}
	for _, rc := range by {
		sum.Reasons = append(sum.Reasons, *rc)
	}
	slices.SortFunc(sum.Reasons, func(a, b ReasonCount) int {
		if a.Total != b.Total {
			return b.Total - a.Total
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	return sum, nil
}

// parseKeys parses keys in their 32-hex-character form (either case) and
// names every one that is not a key.
func parseKeys(op string, in []string) ([][16]byte, error) {
	out := make([][16]byte, 0, len(in))
	var bad []string
	for _, s := range in {
		k, ok := movement.ParseKey(strings.ToLower(strings.TrimSpace(s)))
		if !ok {
			bad = append(bad, fmt.Sprintf("%q", clip(s)))
			continue
		}
		out = append(out, k)
	}
	if len(bad) == 0 {
		return out, nil
	}
	what := "key " + bad[0] + " is not a movement key"
	switch {
	case len(bad) > 5:
		what = fmt.Sprintf("keys %s and %d more are not movement keys", strings.Join(bad[:5], ", "), len(bad)-5)
	case len(bad) > 1:
		what = fmt.Sprintf("keys %s are not movement keys", strings.Join(bad, ", "))
	}
	return nil, &InputError{Op: op, Field: "keys", Flag: "KEY", Msg: what + ": a key is 32 hexadecimal characters (see `agent dlq list`)"}
}

func keyString(k [16]byte) string { return hex.EncodeToString(k[:]) }

// clip shortens operator input quoted back in an error.
func clip(s string) string { return clipN(s, 40) }

func clipN(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// stateOf says where a key is, for a key that was not quarantined.
func (s *Service) stateOf(k [16]byte) string {
	e, err := s.q.Get(k)
	if err != nil {
		return StateUnknown
	}
	return e.State.String()
}

// dataDir is the directory of the data file: where purge exports go.
func (s *Service) dataDir() string { return filepath.Dir(s.q.Path()) }
