package audit

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
)

// diagWant is a mismatch to name leaf by leaf once the read is done: the
// archive's leaves between from and to were let go (folded) before it
// was found, so that store's archive is read again for them.
type diagWant struct {
	lg       *logState
	from, to uint64
	sizes    []int64
	theirs   []ledger.Leaf
}

// settle settles the log's mismatch, and each one after it: where the
// archive's leaves do not give a signed root, the store is asked for its
// leaves between the last root that matched and that one, and each
// sequence that differs is named. The tree then goes on from the store's
// leaves (which must give the root it signed), so one changed movement is
// one finding and the checkpoints after it are still compared. A store
// that does not answer, or too long a run, leaves the range named and the
// log not compared past it (diverged).
func (v *verifier) settle(ctx context.Context, lg *logState) {
	for lg.diag != nil {
		d := lg.diag
		lg.diag = nil
		from, lo, hi := lg.good.Size, lg.first+uint64(lg.good.Size), lg.first+uint64(d.size)-1
		sizes := []int64{from, d.size}
		what := fmt.Sprintf("the archive's leaves do not give the root of the checkpoint of size %d (they give the one of size %d)", d.size, from)
		if hi-lo+1 > v.o.MaxDiagnose {
			v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindAltered, From: lo, To: hi, Sizes: sizes, Detail: what + "; too many sequences between them to compare one by one"})
			v.diverge(lg, d.size)
			return
		}
		theirs, ok := v.storeLeaves(ctx, lg.store, lo, hi)
		if !ok {
			v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindAltered, From: lo, To: hi, Sizes: sizes, Detail: what + "; the store no longer holds those leaves to name which changed"})
			v.diverge(lg, d.size)
			return
		}
		if lg.tree.Size > from {
			v.diagnose = append(v.diagnose, diagWant{lg: lg, from: lo, to: hi, sizes: sizes, theirs: theirs})
		} else {
			ours := make(map[uint64]ledger.Leaf, len(theirs))
			for _, l := range lg.pend[:d.size-lg.tree.Size] {
				ours[l.Seq] = l
			}
			if !v.name(lg, theirs, ours, sizes) {
				v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindForked, From: lo, To: hi, Sizes: sizes,
					Detail: what + "; the archive's leaves there are the store's: the store signed a tree it does not hold"})
				v.diverge(lg, d.size)
				return
			}
		}
		if !v.rebase(lg, d, theirs) {
			return
		}
	}
}

// rebase moves the tree to the store's leaves up to a mismatched size,
// when they give the root the store signed there.
func (v *verifier) rebase(lg *logState, d *mismatch, theirs []ledger.Leaf) bool {
	f := lg.good.Clone()
	for _, l := range theirs {
		f.Append(l.Hash())
	}
	switch {
	case f.Root() != d.root:
		v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindForked, From: lg.first + uint64(lg.good.Size), To: lg.first + uint64(d.size) - 1, Sizes: []int64{lg.good.Size, d.size},
			Detail: fmt.Sprintf("the store's own leaves do not give the root it signed at size %d", d.size)})
		v.diverge(lg, d.size)
		return false
	case lg.tree.Size > d.size:
		v.diverge(lg, d.size) // the leaves after it were folded onto the archive's
		return false
	}
	lg.pend = lg.pend[d.size-lg.tree.Size:]
	lg.good, lg.tree = f, f.Clone()
	v.settleRoots(lg)
	return true
}

// diverge stops comparing the log past good: its later roots cannot be
// compared with a tree that holds what the store did not log.
func (v *verifier) diverge(lg *logState, size int64) {
	lg.diverged, lg.roots, lg.nextRoot = size, nil, 0
}

// name compares the archive's leaves (ours) with the store's (theirs) and
// reports each sequence that differs; it says whether any did.
func (v *verifier) name(lg *logState, theirs []ledger.Leaf, ours map[uint64]ledger.Leaf, sizes []int64) bool {
	named := false
	for _, want := range theirs {
		got, ok := ours[want.Seq]
		switch {
		case !ok:
			named = true // reported as missing
		case got == want:
		default:
			named = true
			if other, ok := findMoved(theirs, got); ok {
				v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindReordered, From: want.Seq, To: want.Seq, Sizes: sizes,
					Detail: fmt.Sprintf("sequence %d holds the movement (key %s) the store logged at sequence %d", want.Seq, hex.EncodeToString(got.Key[:]), other)})
				continue
			}
			if got.Key == want.Key {
				v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindAltered, From: want.Seq, To: want.Seq, Sizes: sizes,
					Detail: fmt.Sprintf("movement %s at sequence %d has another digest than the store logged", hex.EncodeToString(got.Key[:]), want.Seq)})
				continue
			}
			v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindAltered, From: want.Seq, To: want.Seq, Sizes: sizes,
				Detail: fmt.Sprintf("sequence %d holds movement %s; the store logged %s", want.Seq, hex.EncodeToString(got.Key[:]), hex.EncodeToString(want.Key[:]))})
		}
	}
	return named
}

// findMoved says at which other sequence the store logged the movement
// (key and digest) that l holds.
func findMoved(theirs []ledger.Leaf, l ledger.Leaf) (uint64, bool) {
	for _, t := range theirs {
		if t.Key == l.Key && t.Digest == l.Digest && t.Seq != l.Seq {
			return t.Seq, true
		}
	}
	return 0, false
}

// nameFromArchive names a mismatch whose archive leaves were let go: it
// reads that store's archive again, headers only, up to where the pass's
// read ended.
func (v *verifier) nameFromArchive(ctx context.Context, names []string, ends lastSeqs, d diagWant) error {
	ours := make(map[uint64]ledger.Leaf, d.to-d.from+1)
	prog := v.progress(ReadDiagnose, 0)
	for i, name := range names {
		n, err := scan(ctx, v.js, name, ends[name], []string{central.ArchiveSubject(d.lg.store)}, true, func(r record) error {
			if r.token != "" {
				return nil
			}
			if l, ok := leafOf(r.h); ok && l.Seq >= d.from && l.Seq <= d.to {
				if _, seen := ours[l.Seq]; !seen {
					ours[l.Seq] = l
				}
			}
			return nil
		}, prog(i))
		v.rep.Reread += n
		if err != nil {
			return err
		}
	}
	if !v.name(d.lg, d.theirs, ours, d.sizes) {
		v.find(Finding{Store: d.lg.store, Log: d.lg.id, Kind: KindForked, From: d.from, To: d.to, Sizes: d.sizes,
			Detail: "the archive's leaves there are the store's: the store signed a tree it does not hold"})
	}
	return nil
}
