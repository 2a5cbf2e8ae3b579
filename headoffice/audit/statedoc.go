package audit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
)

// MaxSavedLeaves bounds the leaves a log keeps in the state between
// passes (those since its last checkpoint, and those after a hole no
// checkpoint covers yet), and the leaves of no log yet a store keeps:
// past it the oldest pending leaves are folded into the tree (the next
// signed root is compared from there), a hole is settled as missing, and
// leaves of no log are counted as before any log.
const MaxSavedLeaves = 4096

// maxSavedRoots bounds the signed roots a log keeps for sizes its leaves
// have not reached yet (thinned as thinRoots does).
const maxSavedRoots = 64

// streamDoc is an archive as a pass left it: its identity (when it was
// created, its first sequence, how many records were deleted from it, its
// max_age), how far it was read, the last record's fingerprint, and marks
// of the sequence reached and its time at each pass.
type streamDoc struct {
	Created  time.Time     `json:"created"`
	First    uint64        `json:"first"`
	Last     uint64        `json:"last"`
	Deleted  uint64        `json:"deleted"`
	MaxAge   time.Duration `json:"max_age"`
	PrintSeq uint64        `json:"print_seq,omitempty"`
	Print    []byte        `json:"print,omitempty"`
	Marks    []markDoc     `json:"marks,omitempty"`
}

type markDoc struct {
	Seq uint64    `json:"seq"`
	At  time.Time `json:"at"`
}

// storeDoc is a store of the roster: the key ids the roster gave it, its
// logs, the movements before any log, and the leaves of no log yet.
type storeDoc struct {
	Keys    []string `json:"keys"`
	Logs    []logDoc `json:"logs,omitempty"`
	Before  spanDoc  `json:"before,omitzero"`
	Orphans []byte   `json:"orphans,omitempty"`
	Dropped uint64   `json:"dropped,omitempty"`
}

type spanDoc struct {
	N    uint64 `json:"n"`
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// logDoc is a log's logState between passes: frontiers in
// ledger.Frontier's binary form, leaves in ledger.Leaf's, one after the
// other.
type logDoc struct {
	ID          string    `json:"id"`
	First       uint64    `json:"first"`
	Good        []byte    `json:"good"`
	Tree        []byte    `json:"tree,omitempty"`
	Pend        []byte    `json:"pend,omitempty"`
	Ahead       []byte    `json:"ahead,omitempty"`
	Roots       []rootDoc `json:"roots,omitempty"`
	Last        *rootDoc  `json:"last,omitempty"`
	Anchor      []byte    `json:"anchor,omitempty"`
	AnchorAt    time.Time `json:"anchor_at,omitzero"`
	Latest      int64     `json:"latest,omitempty"`
	Signed      int64     `json:"signed,omitempty"`
	Witnessed   int64     `json:"witnessed,omitempty"`
	Checkpoints uint64    `json:"checkpoints,omitempty"`
	Repeats     uint64    `json:"repeats,omitempty"`
	LeafMax     uint64    `json:"leaf_max,omitempty"`
	Broken      string    `json:"broken,omitempty"`
	Diverged    int64     `json:"diverged,omitempty"`
	// Diag is a mismatch found and not settled yet (a re-check that
	// goes on in the next pass settles it when it ends).
	Diag *rootDoc `json:"diag,omitempty"`
}

type rootDoc struct {
	Store string `json:"store,omitempty"`
	Log   string `json:"log,omitempty"`
	Size  int64  `json:"size"`
	Root  []byte `json:"root"`
}

// recheckDoc is a sweep of the rolling re-check under way: its stores'
// logs as far as it rebuilt them, where it reads each archive from and up
// to, the roots it must reach (what the pass had verified when it
// began), how many records it read and when it began.
type recheckDoc struct {
	Stores  map[string]storeDoc `json:"stores"`
	From    map[string]uint64   `json:"from"`
	Until   map[string]uint64   `json:"until"`
	Targets []rootDoc           `json:"targets"`
	Read    uint64              `json:"read"`
	Started time.Time           `json:"started"`
}

// rosterKeys are the key ids the roster gives a store, sorted.
func rosterKeys(v *verifier, store string) []string {
	var out []string
	for _, k := range v.o.Roster.Keys(store) {
		out = append(out, ledger.KeyID(k))
	}
	slices.Sort(out)
	return out
}

func encodeLeaves(ls []ledger.Leaf) []byte {
	out := make([]byte, 0, len(ls)*ledger.LeafSize)
	for _, l := range ls {
		out = append(out, l.Bytes()...)
	}
	return out
}

func decodeLeaves(b []byte) ([]ledger.Leaf, error) {
	if len(b)%ledger.LeafSize != 0 || len(b)/ledger.LeafSize > MaxSavedLeaves {
		return nil, errors.New("a list of leaves of another length")
	}
	out := make([]ledger.Leaf, 0, len(b)/ledger.LeafSize)
	for ; len(b) > 0; b = b[ledger.LeafSize:] {
		l, err := ledger.ParseLeaf(b[:ledger.LeafSize])
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func frontierBytes(f ledger.Frontier) []byte {
	b, _ := f.MarshalBinary() // a frontier the tree code built is valid
	return b
}

func decodeFrontier(b []byte) (ledger.Frontier, error) {
	var f ledger.Frontier
	err := f.UnmarshalBinary(b)
	return f, err
}

// logToDoc is lg as the state keeps it, bounded: the oldest pending
// leaves past MaxSavedLeaves folded into the tree, the roots past
// maxSavedRoots thinned. Leaves ahead of a hole are bounded by conclude.
func logToDoc(lg *logState) logDoc {
	if n := len(lg.pend) - MaxSavedLeaves; n > 0 {
		lg.fold(n)
	}
	for len(lg.roots) > maxSavedRoots {
		thinRoots(lg.roots)
	}
	d := logDoc{ID: lg.id, First: lg.first, Good: frontierBytes(lg.good), Pend: encodeLeaves(lg.pend),
		Latest: lg.latest, Signed: lg.signed, Witnessed: lg.witnessed, Checkpoints: lg.checkpoints, Repeats: lg.repeats,
		LeafMax: lg.leafMax, Broken: lg.broken, Diverged: lg.diverged}
	if lg.tree.Size != lg.good.Size {
		d.Tree = frontierBytes(lg.tree)
	}
	ahead := slices.SortedFunc(maps.Values(lg.ahead), func(a, b ledger.Leaf) int { return int64Cmp(a.Seq, b.Seq) })
	d.Ahead = encodeLeaves(ahead)
	for _, s := range slices.Sorted(maps.Keys(lg.roots)) {
		r := lg.roots[s]
		d.Roots = append(d.Roots, rootDoc{Size: s, Root: r[:]})
	}
	if lg.last != nil {
		d.Last = &rootDoc{Size: lg.last.Size, Root: lg.last.Root[:]}
	}
	if lg.diag != nil {
		d.Diag = &rootDoc{Size: lg.diag.size, Root: lg.diag.root[:]}
	}
	if lg.anchor.tree.Size > 0 {
		d.Anchor, d.AnchorAt = frontierBytes(lg.anchor.tree), lg.anchor.at
	}
	return d
}

func int64Cmp(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// logFromDoc is the logState a logDoc keeps, checked: every entry must be
// one a pass could have saved.
func logFromDoc(store string, d logDoc) (*logState, error) {
	if !ledger.ValidLogID(d.ID) || d.First == 0 {
		return nil, errors.New("a log without a valid id or first sequence")
	}
	lg := newLog(store, d.ID, d.First)
	var err error
	if lg.good, err = decodeFrontier(d.Good); err != nil {
		return nil, err
	}
	lg.tree = lg.good.Clone()
	if d.Tree != nil {
		if lg.tree, err = decodeFrontier(d.Tree); err != nil || lg.tree.Size < lg.good.Size {
			return nil, errors.New("a log whose tree is behind what it matched")
		}
	}
	if d.Anchor != nil {
		if lg.anchor.tree, err = decodeFrontier(d.Anchor); err != nil || lg.anchor.tree.Size > lg.good.Size {
			return nil, errors.New("a log whose anchor is past what it matched")
		}
		lg.anchor.at = d.AnchorAt
	}
	if err := lg.leavesFromDoc(d); err != nil {
		return nil, err
	}
	if err := lg.rootsFromDoc(d); err != nil {
		return nil, err
	}
	if d.Latest < 0 || d.Signed < d.Latest || d.Witnessed < 0 || d.Diverged < 0 {
		return nil, errors.New("a log with negative sizes")
	}
	lg.latest, lg.signed, lg.witnessed, lg.checkpoints, lg.repeats = d.Latest, d.Signed, d.Witnessed, d.Checkpoints, d.Repeats
	lg.leafMax, lg.broken, lg.diverged = d.LeafMax, d.Broken, d.Diverged
	return lg, nil
}

// leavesFromDoc takes the pending leaves (the run from the tree's size
// on) and those ahead of a hole (after it, none twice).
func (lg *logState) leavesFromDoc(d logDoc) error {
	pend, err := decodeLeaves(d.Pend)
	if err != nil {
		return err
	}
	for i, l := range pend {
		if l.Seq != lg.first+uint64(lg.tree.Size)+uint64(i) {
			return errors.New("pending leaves out of their run")
		}
	}
	if len(pend) > 0 {
		lg.pend = pend
	}
	ahead, err := decodeLeaves(d.Ahead)
	if err != nil {
		return err
	}
	for _, l := range ahead {
		if _, dup := lg.ahead[l.Seq]; dup || l.Seq <= lg.next() {
			return errors.New("leaves ahead of a hole that are not after it")
		}
		if lg.ahead == nil {
			lg.ahead = map[uint64]ledger.Leaf{}
		}
		lg.ahead[l.Seq] = l
	}
	return nil
}

// rootsFromDoc takes the roots waiting for their leaves, and the latest
// checkpoint verified.
func (lg *logState) rootsFromDoc(d logDoc) error {
	if len(d.Roots) > maxSavedRoots {
		return errors.New("more roots than a log keeps")
	}
	if r := d.Diag; r != nil {
		if len(r.Root) != len(ledger.Hash{}) || r.Size <= lg.tree.Size || r.Size > lg.size() {
			return errors.New("a mismatch outside the leaves held")
		}
		lg.diag = &mismatch{size: r.Size, root: ledger.Hash(r.Root)}
	}
	for _, r := range d.Roots {
		// Only a mismatch not settled yet holds back roots the leaves
		// reached.
		if len(r.Root) != len(ledger.Hash{}) || r.Size <= lg.tree.Size || r.Size <= lg.size() && lg.diag == nil {
			return errors.New("a root that is not waiting for its leaves")
		}
		lg.setRoot(r.Size, ledger.Hash(r.Root))
	}
	if d.Last != nil {
		if len(d.Last.Root) != len(ledger.Hash{}) || d.Last.Size <= 0 {
			return errors.New("a latest checkpoint without a root")
		}
		lg.last = &ledger.Checkpoint{Store: lg.store, Log: lg.id, First: lg.first, Size: d.Last.Size, Root: ledger.Hash(d.Last.Root)}
	}
	return nil
}

// validate checks what decodeState read: every entry must be one a pass
// could have saved.
func (st *stateDoc) validate() error {
	if st.Streams == nil || st.Stores == nil {
		return errors.New("no archives or stores")
	}
	for name, s := range st.Streams {
		if name == "" || s.Last+1 < s.First || len(s.Marks) > maxMarks {
			return fmt.Errorf("archive %q", name)
		}
	}
	for id, sd := range st.Stores {
		if !central.ValidStoreID(id) {
			return errors.New("a store id that is not one")
		}
		if err := sd.validate(id); err != nil {
			return fmt.Errorf("store %s: %w", id, err)
		}
	}
	if r := st.Recheck; r != nil {
		for id, sd := range r.Stores {
			if !central.ValidStoreID(id) {
				return errors.New("a re-check of a store id that is not one")
			}
			if err := sd.validate(id); err != nil {
				return fmt.Errorf("re-check of store %s: %w", id, err)
			}
		}
		for _, t := range r.Targets {
			if _, ok := r.Stores[t.Store]; !ok || t.Size <= 0 || len(t.Root) != len(ledger.Hash{}) {
				return errors.New("a re-check's target that cannot be")
			}
		}
	}
	return nil
}

func (sd storeDoc) validate(id string) error {
	seen := map[string]bool{}
	for _, d := range sd.Logs {
		if seen[d.ID] {
			return errors.New("a log twice")
		}
		seen[d.ID] = true
		if _, err := logFromDoc(id, d); err != nil {
			return err
		}
	}
	_, err := decodeLeaves(sd.Orphans)
	return err
}
