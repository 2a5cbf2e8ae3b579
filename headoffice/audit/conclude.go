package audit

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// conclude settles what the read left: the mismatches, the holes a
// checkpoint covers, the leaves a checkpoint covers that never came, the
// stores' own latest checkpoints and the witness's, and the movements no
// checkpoint covers yet; then names what changed where the archive's
// leaves had to be read again, and compares the records of sequences
// already folded into a tree with the tree's leaves (checkRepeats).
func (v *verifier) conclude(ctx context.Context, names []string, ends lastSeqs) error {
	now := v.o.Now()
	for _, i := range v.needLog {
		f := &v.rep.Findings[i]
		if lg := v.store(f.Store).logAt(f.From); lg != nil {
			f.Log = lg.id
		}
	}
	v.needLog = nil
	for _, st := range v.sortedStores() {
		if st.again {
			continue
		}
		for _, lg := range st.order {
			v.concludeLog(ctx, lg, now)
		}
		before := st.before
		for _, l := range st.orphans {
			before.add(l.Seq)
		}
		if before.n > 0 && !v.quiet {
			v.find(Finding{Store: st.id, Kind: KindUncovered, From: before.from, To: before.to,
				Detail: fmt.Sprintf("%d archived movement(s) before any log of the store starts", before.n)})
		}
	}
	if !v.quiet {
		v.rep.Stores = len(v.stores)
	}
	for _, d := range v.diagnose {
		if err := v.nameFromArchive(ctx, names, ends, d); err != nil {
			return err
		}
	}
	v.diagnose = nil
	return v.checkRepeats(ctx, names, ends)
}

// target is the size a log's leaves must reach: its latest checkpoint in
// the archive, the store's own latest (once central acknowledged it and
// its grace passed), the witness's, and what was verified before the
// tree was started again.
func (v *verifier) target(lg *logState, now time.Time) int64 {
	t := max(lg.latest, lg.ref)
	if lg.storeCp != nil && lg.storePub && now.Sub(lg.storeCp.Time) >= v.o.Grace {
		t = max(t, lg.storeCp.Size)
	}
	return max(t, lg.witnessed)
}

// concludeLog settles one log at the end of the read.
func (v *verifier) concludeLog(ctx context.Context, lg *logState, now time.Time) {
	if lg.diag != nil {
		v.settle(ctx, lg)
	}
	if r, ok := lg.forked[storeSize(lg)]; ok && r == lg.storeCp.Root {
		lg.storeCp = nil // reported as forked
	}
	target := v.target(lg, now)
	// A hole waits for the next pass while no checkpoint covers it yet;
	// one a checkpoint covers is missing.
	for len(lg.ahead) > 0 && lg.broken == "" && (!v.keep || lg.size() < target || len(lg.ahead) > MaxSavedLeaves) {
		v.fillGap(ctx, lg)
		if lg.diag != nil {
			v.settle(ctx, lg)
		}
	}
	v.missingCheckpoints(lg, now)
	switch {
	case lg.broken != "" || lg.diverged != 0:
	case lg.size() < target && len(lg.ahead) == 0:
		v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindMissing, From: lg.next(), To: lg.first + uint64(target) - 1,
			Detail: fmt.Sprintf("the checkpoint of size %d covers sequences the archive does not hold", target)})
	case lg.size() > target && !v.quiet:
		v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindUncovered, From: lg.first + uint64(target), To: lg.next() - 1,
			Detail: "archived movements after the log's last checkpoint"})
	}
	if lg.diverged != 0 && !v.quiet {
		v.note(fmt.Sprintf("store %s log %s: the archive's leaves did not give the root of size %d: nothing past size %d is compared until the log is verified again from the start",
			lg.store, lg.id, lg.diverged, lg.good.Size))
	}
	if !v.quiet {
		v.rep.Logs = append(v.rep.Logs, LogReport{Store: lg.store, Log: lg.id, First: lg.first, Leaves: lg.size(),
			Checkpoints: lg.checkpoints, Latest: lg.latest, StoreLatest: storeSize(lg), Witnessed: lg.witnessed, Matched: lg.good.Size, Repeats: lg.repeats})
	}
}

// missingCheckpoints reports the checkpoints the archive should hold and
// does not: the store's latest (acknowledged by central, past its grace),
// the witness's latest, and one verified before the tree was started
// again.
func (v *verifier) missingCheckpoints(lg *logState, now time.Time) {
	var reported int64
	if lg.storeCp != nil && lg.storePub && now.Sub(lg.storeCp.Time) >= v.o.Grace && lg.storeCp.Size > lg.signed {
		v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindCheckpointMissing, Sizes: []int64{lg.latest, lg.storeCp.Size},
			Detail: fmt.Sprintf("the store's latest checkpoint, size %d, which central acknowledged, is not in the archive (its latest there: size %d)", lg.storeCp.Size, lg.latest)})
		reported = lg.storeCp.Size
	}
	if lg.witnessed > lg.latest && lg.witnessed > reported {
		v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindCheckpointMissing, Sizes: []int64{lg.latest, lg.witnessed},
			Detail: fmt.Sprintf("the witness countersigned a checkpoint of size %d that the archive does not hold (its latest there: size %d)", lg.witnessed, lg.latest)})
		reported = lg.witnessed
	}
	if lg.ref > lg.signed && lg.ref > reported {
		v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindCheckpointMissing, Sizes: []int64{lg.latest, lg.ref},
			Detail: fmt.Sprintf("a checkpoint of size %d was verified in the archive before, and the archive no longer holds one that large (its latest there: size %d)", lg.ref, lg.latest)})
	}
}

func storeSize(lg *logState) int64 {
	if lg.storeCp == nil {
		return 0
	}
	return lg.storeCp.Size
}

// report lists what the tally holds, after every other finding so that
// none of those is pushed out of the list, and names the stores none of
// whose checkpoints could be authenticated.
func (v *verifier) report() {
	for _, f := range v.tally.findings() {
		v.rep.Counts[f.Kind] += int(max(f.Count, 1))
		v.list(f)
	}
	var keyless []string
	for id := range v.tally.stores {
		if st := v.stores[id]; (st == nil || st.before.n == 0) && len(v.o.Roster.Keys(id)) == 0 {
			keyless = append(keyless, id)
		}
	}
	for _, st := range v.stores {
		if st.before.n > 0 && len(v.o.Roster.Keys(st.id)) == 0 {
			keyless = append(keyless, st.id)
		}
	}
	slices.Sort(keyless)
	for i, id := range keyless {
		if i == maxTallySamples {
			v.note(fmt.Sprintf("%d more stores have records in the archive and no key in the roster", len(keyless)-i))
			break
		}
		v.note(fmt.Sprintf("store %s has no key in the roster: none of its checkpoints could be authenticated, and its movements are checked against no log", id))
	}
}
