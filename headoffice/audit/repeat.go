package audit

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
)

// repeatHold holds the records of a sequence whose leaf a log's tree
// already folded (a second record of a sequence the store gave before),
// until the read is done: the tree keeps no leaf it folded, so such a
// record is compared then with the archive's first record of that
// sequence, the one the tree took (checkRepeats). A true repeat, a resend
// after the dedupe horizon, is the same leaf and stays a counted repeat;
// any other is altered. At most Options.MaxDiagnose are held a pass; the
// rest are counted (over) and said in a note.
type repeatHold struct {
	held []heldRepeat
	over uint64
}

type heldRepeat struct {
	lg *logState
	l  ledger.Leaf
}

// holdRepeat holds l, a record of a sequence lg's tree already folded. A
// re-check's read (quiet) holds nothing: the pass that first read the
// record compared it.
func (v *verifier) holdRepeat(lg *logState, l ledger.Leaf) {
	switch {
	case v.quiet:
	case uint64(len(v.repeats.held)) >= v.o.MaxDiagnose:
		v.repeats.over++
	default:
		v.repeats.held = append(v.repeats.held, heldRepeat{lg, l})
	}
}

// checkRepeats compares each held record with the archive's first record
// of its sequence: it reads the archive of each store with held records
// once more, headers only, up to where the pass's read ended, keeping
// only the first leaf of each held sequence (memory: one leaf a held
// record).
func (v *verifier) checkRepeats(ctx context.Context, names []string, ends lastSeqs) error {
	h := v.repeats
	if h.over > 0 {
		v.note(fmt.Sprintf("%d records of sequences already in a log's tree were counted as repeats without being compared with the tree's leaf (more than %d in one pass): run hq verify again to compare them", h.over, v.o.MaxDiagnose))
	}
	byStore := map[string]map[uint64][]heldRepeat{}
	for _, r := range h.held {
		m := byStore[r.lg.store]
		if m == nil {
			m = map[uint64][]heldRepeat{}
			byStore[r.lg.store] = m
		}
		m[r.l.Seq] = append(m[r.l.Seq], r)
	}
	h.held, h.over = nil, 0
	for _, store := range slices.Sorted(maps.Keys(byStore)) {
		want := byStore[store]
		first, err := v.firstLeaves(ctx, names, ends, store, want)
		if err != nil {
			return err
		}
		for _, seq := range slices.Sorted(maps.Keys(want)) {
			f, ok := first[seq]
			for _, r := range want[seq] {
				if ok && r.l != f {
					v.find(Finding{Store: store, Log: r.lg.id, Kind: KindAltered, From: seq, To: seq, Detail: repeatDetail(f, r.l)})
					break
				}
			}
		}
	}
	return nil
}

// firstLeaves reads store's archive, headers only, for the first leaf of
// each sequence of want.
func (v *verifier) firstLeaves(ctx context.Context, names []string, ends lastSeqs, store string, want map[uint64][]heldRepeat) (map[uint64]ledger.Leaf, error) {
	first := make(map[uint64]ledger.Leaf, len(want))
	prog := v.progress(ReadDiagnose, 0)
	for i, name := range names {
		n, err := scan(ctx, v.js, name, ends[name], []string{central.ArchiveSubject(store)}, true, func(r record) error {
			if r.token != "" {
				return nil
			}
			if l, ok := leafOf(r.h); ok && want[l.Seq] != nil {
				if _, seen := first[l.Seq]; !seen {
					first[l.Seq] = l
				}
			}
			return nil
		}, prog(i))
		v.rep.Reread += n
		if err != nil {
			return nil, err
		}
	}
	return first, nil
}

// repeatDetail says how a second record of a sequence differs from the
// leaf the log's tree holds there.
func repeatDetail(tree, again ledger.Leaf) string {
	if tree.Key == again.Key {
		return fmt.Sprintf("movement %s is archived again under sequence %d with another digest than the log's leaf", hex.EncodeToString(again.Key[:]), again.Seq)
	}
	return fmt.Sprintf("sequence %d is archived again for movement %s; the log's leaf there is movement %s", again.Seq, hex.EncodeToString(again.Key[:]), hex.EncodeToString(tree.Key[:]))
}
