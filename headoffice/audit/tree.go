package audit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
)

// logState is one log's verification: its tree, rebuilt from the
// archive's leaves in sequence order and compared with the roots its
// store signed, and what the archive said of the log. Everything but the
// fields of one pass is kept in the state between passes.
//
// The tree is kept as two frontiers and the leaves since: good is the
// tree at the largest size whose root matched a signed root; tree is at
// the size the leaves were folded to (the same, unless leaves no
// checkpoint covered yet were folded in to bound the memory); pend are
// the leaves after it, in order, waiting for the next signed root. So a
// signed root of any size from tree's on is compared when its leaves are
// there, whether it arrives before them or after, and a mismatch can be
// named leaf by leaf from pend.
type logState struct {
	store, id string
	first     uint64

	good, tree ledger.Frontier
	pend       []ledger.Leaf
	// ahead are leaves after a missing one, by sequence.
	ahead map[uint64]ledger.Leaf
	// roots are signed roots at sizes the leaves have not reached.
	roots    map[int64]ledger.Hash
	nextRoot int64 // the smallest size in roots, 0 when none
	anchor   anchor

	last        *ledger.Checkpoint // the latest checkpoint verified, in archive order
	latest      int64              // the largest size signed in the archive, not forked
	signed      int64              // the largest size signed in the archive, forked or not
	witnessed   int64
	checkpoints uint64
	repeats     uint64
	leafMax     uint64
	// broken says why the tree stopped (a hole the store could not fill):
	// past it the log's checkpoints are checked through their proofs only.
	broken string
	// diverged is the size of a signed root the archive's leaves did not
	// give and that could not be settled: nothing past good is compared.
	diverged int64

	// Of one pass.
	// matched are the last roots the tree matched, by size (at most
	// maxMatched), so that a signed checkpoint archived after the tree
	// passed its size is still compared.
	matched  map[int64]ledger.Hash
	floor    uint64 // leaves below it are under the anchor the tree started from
	forked   map[int64]ledger.Hash
	storeCp  *ledger.Checkpoint
	storePub bool
	diag     *mismatch
	ref      int64 // a size verified before the tree was started again, which the archive must still give
	// Of a re-check: when the records of the leaves held were stored, by
	// sequence, and the anchor the re-check proposes once it matched.
	ats       map[uint64]time.Time
	candidate *anchor
	// aging says the re-check read a leaf whose record the archive's
	// retention lets go within AnchorLead: only then does the anchor move.
	aging bool
}

// anchor is where a log's tree starts when it is rebuilt from the archive
// (a re-check, a store read again): its first leaf at first, or, once the
// archive's retention nears that, a tree a re-check verified, with the
// earliest time a record of its last leaf, or of a leaf after it already
// read, was stored (the re-read starts a little before that).
type anchor struct {
	tree ledger.Frontier
	at   time.Time
}

// mismatch is a signed root the archive's leaves did not give.
type mismatch struct {
	size int64
	root ledger.Hash
}

func newLog(store, id string, first uint64) *logState {
	return &logState{store: store, id: id, first: first, floor: first}
}

// size is how many of the log's leaves, from its first, are there in an
// unbroken run; next is the sequence of the one after.
func (lg *logState) size() int64  { return lg.tree.Size + int64(len(lg.pend)) }
func (lg *logState) next() uint64 { return lg.first + uint64(lg.size()) }

// restart starts the tree again at the anchor: what was verified becomes a
// reference that the archive read again must give.
func (lg *logState) restart() {
	if lg.good.Size > lg.anchor.tree.Size {
		lg.ref = lg.good.Size
		lg.setRoot(lg.good.Size, lg.good.Root())
	}
	lg.good, lg.tree = lg.anchor.tree.Clone(), lg.anchor.tree.Clone()
	lg.pend, lg.ahead = nil, nil
	lg.floor = lg.first + uint64(lg.anchor.tree.Size)
	lg.broken, lg.diverged, lg.diag = "", 0, nil
	lg.last, lg.latest, lg.signed, lg.checkpoints, lg.repeats = nil, 0, 0, 0, 0
	for s := range lg.roots {
		if s <= lg.tree.Size {
			delete(lg.roots, s)
		}
	}
	lg.nextRoot = minKey(lg.roots)
}

// addLeaf puts a leaf into its log's tree, or holds it until the ones
// before it come.
func (v *verifier) addLeaf(ctx context.Context, lg *logState, l ledger.Leaf) {
	if lg.broken != "" || l.Seq < lg.floor {
		return
	}
	lg.leafMax = max(lg.leafMax, l.Seq)
	switch n := lg.next(); {
	case l.Seq < n:
		lg.repeats++
		switch i := int64(l.Seq-lg.first) - lg.tree.Size; {
		case i < 0:
			v.holdRepeat(lg, l) // its leaf was folded: compared after the read
		case lg.pend[i] != l:
			v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindAltered, From: l.Seq, To: l.Seq, Detail: "two different records of one sequence"})
		}
		return
	case l.Seq > n:
		if lg.ahead == nil {
			lg.ahead = map[uint64]ledger.Leaf{}
		}
		if old, ok := lg.ahead[l.Seq]; ok {
			if old != l {
				v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindAltered, From: l.Seq, To: l.Seq, Detail: "two different records of one sequence"})
			}
			lg.repeats++
			return
		}
		lg.ahead[l.Seq] = l
		if len(lg.ahead) > v.o.MaxBuffered {
			v.fillGap(ctx, lg)
		}
		return
	}
	v.push(lg, l)
	v.drain(lg)
}

// push appends the next leaf, and compares the root a signed checkpoint
// gave at the size it makes.
func (v *verifier) push(lg *logState, l ledger.Leaf) {
	lg.pend = append(lg.pend, l)
	if lg.nextRoot != 0 && lg.size() >= lg.nextRoot {
		v.settleRoots(lg)
	}
	if len(lg.pend) > v.o.MaxBuffered {
		lg.fold(len(lg.pend) / 2)
	}
}

// drain appends the leaves held ahead that now follow.
func (v *verifier) drain(lg *logState) {
	for len(lg.ahead) > 0 {
		l, ok := lg.ahead[lg.next()]
		if !ok {
			return
		}
		delete(lg.ahead, l.Seq)
		v.push(lg, l)
	}
}

// fold folds the first n pending leaves into tree, unverified: a later
// signed root is compared from there.
func (lg *logState) fold(n int) {
	if lg.tree.Size == lg.good.Size {
		lg.tree = lg.tree.Clone() // good keeps its nodes
	}
	for _, l := range lg.pend[:n] {
		lg.tree.Append(l.Hash())
		delete(lg.ats, l.Seq) // no anchor falls inside what was folded
	}
	lg.pend = slices.Clone(lg.pend[n:])
}

// settleRoots compares the roots the leaves have now reached, smallest
// first, while the log is compared at all.
func (v *verifier) settleRoots(lg *logState) {
	for lg.nextRoot != 0 && lg.nextRoot <= lg.size() && lg.diag == nil && lg.diverged == 0 {
		size, root := lg.nextRoot, lg.roots[lg.nextRoot]
		delete(lg.roots, size)
		lg.nextRoot = minKey(lg.roots)
		if size > lg.tree.Size {
			v.compare(lg, size, root)
		}
	}
}

// compare compares the root of the first size leaves (between tree's size
// and the leaves there) with a signed root. On a match the tree moves
// there; on a mismatch the log waits for the end of the read, where what
// differs is named (settle), and nothing past good is compared until then.
func (v *verifier) compare(lg *logState, size int64, root ledger.Hash) {
	k := int(size - lg.tree.Size)
	cand := lg.tree.Clone()
	for _, l := range lg.pend[:k] {
		cand.Append(l.Hash())
	}
	if cand.Root() != root {
		lg.diag = &mismatch{size: size, root: root}
		return
	}
	lg.good, lg.tree = cand, cand.Clone()
	lg.remember(size, root)
	lg.pend = lg.pend[k:]
	if len(lg.pend) == 0 {
		lg.pend = nil
	}
	if lg.ats != nil {
		v.propose(lg)
	}
}

// maxMatched bounds the roots a log remembers having matched.
const maxMatched = 64

// remember keeps a root the tree matched, letting go of the smallest past
// maxMatched.
func (lg *logState) remember(size int64, root ledger.Hash) {
	if lg.matched == nil {
		lg.matched = map[int64]ledger.Hash{}
	}
	lg.matched[size] = root
	if len(lg.matched) > maxMatched {
		delete(lg.matched, minKey(lg.matched))
	}
}

// propose keeps, in a re-check, the tree just matched as the log's next
// anchor when the re-check read leaves whose records are before the
// anchor edge (the retention lets them go within AnchorLead) and this
// tree's last leaf's record is past it: with the
// earliest time a record of it or of a leaf after it already read was
// stored, so a read from a little before finds every leaf after it.
func (v *verifier) propose(lg *logState) {
	lastSeq := lg.first + uint64(lg.good.Size) - 1
	at, ok := lg.ats[lastSeq]
	for s, t := range lg.ats {
		if s < lastSeq {
			delete(lg.ats, s)
		} else if t.Before(at) {
			at = t
		}
	}
	if !ok || v.anchorEdge.IsZero() || !lg.aging || lg.candidate != nil || lg.ats[lastSeq].Before(v.anchorEdge) {
		return
	}
	lg.candidate = &anchor{tree: lg.good.Clone(), at: at}
}

// signedRoot compares a signed root with the tree at its size when the
// leaves are there, or keeps it until they are; two roots for one size
// are a fork. The roots kept are bounded (thinRoots).
func (v *verifier) signedRoot(lg *logState, size int64, root ledger.Hash, what string) {
	if r, ok := lg.forked[size]; ok && r == root {
		return
	}
	switch {
	case size == lg.good.Size && size > 0:
		if lg.good.Root() != root {
			v.findSigned(Finding{Store: lg.store, Log: lg.id, Kind: KindForked, Sizes: []int64{size},
				Detail: fmt.Sprintf("%s and another signed checkpoint give size %d two roots", what, size)})
		}
		return
	case size <= lg.tree.Size:
		// Past the tree already: compared with the root matched there when
		// it is one of the last remembered, else checked through the
		// proofs that chain it to a later root.
		if r, ok := lg.matched[size]; ok && r != root {
			v.findSigned(Finding{Store: lg.store, Log: lg.id, Kind: KindForked, Sizes: []int64{size},
				Detail: fmt.Sprintf("%s and another signed checkpoint give size %d two roots", what, size)})
		}
		return
	}
	if r, ok := lg.roots[size]; ok {
		if r != root {
			v.findSigned(Finding{Store: lg.store, Log: lg.id, Kind: KindForked, Sizes: []int64{size},
				Detail: fmt.Sprintf("%s and another signed checkpoint give size %d two roots", what, size)})
		}
		return
	}
	lg.setRoot(size, root)
	if len(lg.roots) > v.o.MaxSnapshots {
		thinRoots(lg.roots)
		lg.nextRoot = minKey(lg.roots)
	}
	if size <= lg.size() {
		v.settleRoots(lg)
	}
}

func (lg *logState) setRoot(size int64, root ledger.Hash) {
	if lg.roots == nil {
		lg.roots = map[int64]ledger.Hash{}
	}
	lg.roots[size] = root
	if lg.nextRoot == 0 || size < lg.nextRoot {
		lg.nextRoot = size
	}
}

// thinRoots lets go of every other of the older sizes of roots, keeping
// the newest 16: the newest root decides whether the log holds (the
// proofs chain every earlier one to it); the older ones only narrow down
// where a difference lies.
func thinRoots(roots map[int64]ledger.Hash) {
	sizes := slices.Sorted(maps.Keys(roots))
	old := sizes[:max(0, len(sizes)-16)]
	for i, s := range old {
		if i%2 == 1 {
			delete(roots, s)
		}
	}
}

func minKey(m map[int64]ledger.Hash) int64 {
	var out int64
	for k := range m {
		if out == 0 || k < out {
			out = k
		}
	}
	return out
}

// fillGap settles the lowest run of sequences missing before the leaves
// held: they are missing from the archive; the store's leaves, when it
// still holds them, let the tree go on, else it is broken there.
func (v *verifier) fillGap(ctx context.Context, lg *logState) {
	low := uint64(0)
	for s := range lg.ahead {
		if low == 0 || s < low {
			low = s
		}
	}
	from, to := lg.next(), low-1
	v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindMissing, From: from, To: to,
		Detail: fmt.Sprintf("%d sequence(s) of the log are not in the archive", to-from+1)})
	if leaves, ok := v.storeLeaves(ctx, lg.store, from, to); ok {
		for _, l := range leaves {
			v.push(lg, l)
		}
		v.drain(lg)
		return
	}
	lg.broken = fmt.Sprintf("the store does not hold sequences %d-%d: the archive's tree is not rebuilt past sequence %d, and the checkpoints above size %d are checked through their proofs only",
		from, to, from-1, lg.size())
	lg.ahead = nil
	v.note(fmt.Sprintf("store %s log %s: %s", lg.store, lg.id, lg.broken))
}

// storeLeaves asks the store for its leaves from..to; ok only when it
// gave every one, well formed.
func (v *verifier) storeLeaves(ctx context.Context, store string, from, to uint64) ([]ledger.Leaf, bool) {
	if v.o.Asker == nil || to < from || to-from+1 > v.o.MaxDiagnose {
		return nil, false
	}
	var out []ledger.Leaf
	for lo := from; lo <= to; {
		hi := min(to, lo+command.MaxLedgerLeaves-1)
		rctx, cancel := context.WithTimeout(ctx, v.o.Timeout)
		res, err := v.o.Asker.Ledger(rctx, store, command.LedgerArgs{Leaves: &command.SeqRange{lo, hi}})
		cancel()
		if err != nil || len(res.Leaves) != int(hi-lo+1) {
			return nil, false
		}
		for i, sl := range res.Leaves {
			l, err := (ledger.ProofLeaf{Seq: sl.Seq, Key: sl.Key, Digest: sl.Digest}).Leaf()
			if err != nil || sl.Seq != lo+uint64(i) {
				return nil, false
			}
			out = append(out, l)
		}
		lo = hi + 1
	}
	return out, true
}
