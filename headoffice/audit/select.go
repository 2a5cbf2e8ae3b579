package audit

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/provision"
)

// Selector chooses, per log, the newest checkpoint among the records
// under checkpoint tokens whose signatures verify against the roster
// (ledger.OpenMessage): a subject token, a message id or a size, which
// anyone who may write to the streams can set, chooses nothing, as a CT
// monitor or Go's sumdb client chooses among signed tree heads only. It
// takes records one at a time in any order, so a verifier that reads the
// archive once, or as it grows, can use it as it is. Its memory is one
// checkpoint per log a roster key signed, whatever the other records; it
// is not safe for concurrent use.
type Selector struct {
	roster *provision.Roster
	keys   map[string]note.Verifiers
	logs   map[logKey]ledger.Signed
}

type logKey struct{ store, log string }

// NewSelector returns a Selector that trusts roster's keys, each for its
// own store.
func NewSelector(roster *provision.Roster) *Selector {
	return &Selector{roster: roster, keys: map[string]note.Verifiers{}, logs: map[logKey]ledger.Signed{}}
}

// Add takes the record on store's subjects under message id id with body.
// When a roster key of store signed it, it returns the checkpoint (kept
// when it is its log's newest); otherwise ledger.OpenMessage's error,
// for the caller to count.
func (s *Selector) Add(store, id string, body []byte) (ledger.Signed, error) {
	known, ok := s.keys[store]
	if !ok {
		known = verifiers(s.roster, store, nil)
		if len(s.roster.Keys(store)) > 0 {
			s.keys[store] = known // roster stores only: a bound set
		}
	}
	c, err := ledger.OpenMessage(store, id, body, known)
	if err != nil {
		return c, err
	}
	k := logKey{store, c.Log}
	if cur, ok := s.logs[k]; !ok || c.Size > cur.Size {
		s.logs[k] = c
	}
	return c, nil
}

// Logs are the newest signed checkpoint of each of store's logs, by first
// sequence (two logs that start at one sequence, by when they were
// signed, then by id).
func (s *Selector) Logs(store string) []ledger.Signed {
	var out []ledger.Signed
	for k, c := range s.logs {
		if k.store == store {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b ledger.Signed) int {
		return cmp.Or(cmp.Compare(a.First, b.First), a.Time.Compare(b.Time), cmp.Compare(a.Log, b.Log))
	})
	return out
}

// Covering is the newest signed checkpoint of the log of store that seq
// belongs to (the last log to start at or before it), and whether it
// covers seq; false with no checkpoint when no log starts by seq.
func (s *Selector) Covering(store string, seq uint64) (ledger.Signed, bool) {
	var best ledger.Signed
	found := false
	for _, c := range s.Logs(store) {
		if c.First <= seq {
			best, found = c, true
		}
	}
	return best, found && seq-best.First < uint64(best.Size)
}

// maxTallySamples are the records of a store and kind a tally lists one
// by one; the rest are one finding with their count.
const maxTallySamples = 8

// tally counts records that anyone who may write to the streams can make
// at will (records under checkpoint tokens no roster key signed, movements
// with no usable leaf, witness-stream records without their signatures),
// per store of the roster and kind, those of every other store together,
// and keeps the first few of each as findings: its memory does not grow
// with their number, nor with the store ids they are written under, and
// they cannot push the other findings out of the report's list.
type tally struct {
	roster map[string]bool
	stores map[string]bool // the roster's stores tallied
	per    map[tallyKey]*tallied
}

type tallyKey struct{ store, kind string }

type tallied struct {
	n       uint64
	reasons map[string]uint64 // a fixed set of reasons
	samples []Finding
}

// othersStore stands, in a tally's findings of the rest, for the stores
// outside the roster.
const othersStore = "*"

func newTally(roster []string) *tally {
	t := &tally{roster: map[string]bool{}, stores: map[string]bool{}, per: map[tallyKey]*tallied{}}
	for _, s := range roster {
		t.roster[s] = true
	}
	return t
}

// add counts f, a record of f.Store, for reason (one of a fixed set).
func (t *tally) add(f Finding, reason string) {
	k := tallyKey{othersStore, f.Kind}
	if t.roster[f.Store] {
		k.store = f.Store
		t.stores[f.Store] = true
	}
	e := t.per[k]
	if e == nil {
		e = &tallied{reasons: map[string]uint64{}}
		t.per[k] = e
	}
	e.n++
	e.reasons[reason]++
	if len(e.samples) < maxTallySamples {
		e.samples = append(e.samples, f)
	}
}

// findings are the tally's findings, by store and kind: the samples, then
// one finding with the count of the rest and their reasons.
func (t *tally) findings() []Finding {
	keys := slices.SortedFunc(maps.Keys(t.per), func(a, b tallyKey) int {
		return cmp.Or(cmp.Compare(a.store, b.store), cmp.Compare(a.kind, b.kind))
	})
	var out []Finding
	for _, k := range keys {
		e := t.per[k]
		out = append(out, e.samples...)
		if rest := e.n - uint64(len(e.samples)); rest > 0 {
			var why []string
			for _, r := range slices.Sorted(maps.Keys(e.reasons)) {
				why = append(why, fmt.Sprintf("%d %s", e.reasons[r], r))
			}
			whose := ""
			if k.store == othersStore {
				whose = " of stores outside the roster"
			}
			out = append(out, Finding{Store: k.store, Kind: k.kind, Count: rest,
				Detail: fmt.Sprintf("%d more such records%s, %d in all (%s)", rest, whose, e.n, strings.Join(why, "; "))})
		}
	}
	return out
}

// count is how many records of kind the tally holds.
func (t *tally) count(kind string) uint64 {
	var n uint64
	for k, e := range t.per {
		if k.kind == kind {
			n += e.n
		}
	}
	return n
}
