package audit

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/rxedge/agent/central"
)

// anchorSlack is how long before an anchor's time a read from the anchor
// starts: a leaf after the anchor may have been stored before the leaves
// around it (one delivered before an earlier one that was retried).
const anchorSlack = 7 * 24 * time.Hour

// restore takes the stores and logs of the saved state. A store whose
// roster keys changed since is read again, alone, after the pass's read
// (records of its that the earlier passes could not authenticate may be
// checkpoints now), and so is a store new in the roster (the archive may
// hold its records already).
func (v *verifier) restore() error {
	if v.saved == nil {
		return nil
	}
	for _, id := range slices.Sorted(maps.Keys(v.saved.Stores)) {
		sd := v.saved.Stores[id]
		st := v.store(id)
		if !slices.Equal(sd.Keys, rosterKeys(v, id)) {
			v.readAgain(st, "its keys in the roster changed")
			continue
		}
		for _, d := range sd.Logs {
			lg, err := logFromDoc(id, d)
			if err != nil {
				return err // validated when the state was read
			}
			st.insert(lg)
		}
		st.before = span{n: sd.Before.N, from: sd.Before.From, to: sd.Before.To}
		st.orphans, _ = decodeLeaves(sd.Orphans)
		st.dropped = sd.Dropped
	}
	for _, id := range v.o.Roster.Stores {
		if _, ok := v.saved.Stores[id]; !ok && len(v.saved.Streams) > 0 {
			v.readAgain(v.store(id), "it is new in the roster")
		}
	}
	return nil
}

// child is a verifier of store id alone, for a read of its records again,
// reporting into the pass's report: its logs are the state's, each
// started again from its anchor (fresh: none), so what was verified is
// what the records read again must give.
func (v *verifier) child(id string, quiet bool, docs []logDoc) *verifier {
	c := v.newChild(quiet, map[string]bool{id: true})
	st := c.store(id)
	for _, d := range docs {
		if lg, err := logFromDoc(id, d); err == nil {
			lg.restart()
			st.insert(lg)
		}
	}
	return c
}

// newChild is a verifier of the stores only holds, reporting into the
// pass's report.
func (v *verifier) newChild(quiet bool, only map[string]bool) *verifier {
	return &verifier{o: v.o, js: v.js, stores: map[string]*storeState{}, rep: v.rep, only: only,
		tally: v.tally, keep: v.keep || quiet, quiet: quiet, reread: true, saved: v.saved, plan: v.plan, repeats: v.repeats}
}

// since is when a read for the child may start: a little before its
// logs' anchors when every log has one, else at the start (zero).
func (c *verifier) since() time.Time {
	var at time.Time
	for _, st := range c.stores {
		for _, lg := range st.order {
			if lg.anchor.tree.Size == 0 || lg.anchor.at.IsZero() {
				return time.Time{}
			}
			if at.IsZero() || lg.anchor.at.Before(at) {
				at = lg.anchor.at
			}
		}
	}
	if at.IsZero() {
		return at
	}
	return at.Add(-anchorSlack)
}

// readRange reads each archive's records on subjects (nil: all) from
// from[name] (0: from since, or the start) up to until[name], at most
// budget records in all (0: no bound), taking each. It returns how many it
// read, where each archive's read goes on from, and whether it reached
// until in every archive.
func (c *verifier) readRange(ctx context.Context, subjects []string, from, until map[string]uint64, since time.Time, budget uint64, read string) (uint64, map[string]uint64, bool, error) {
	next := maps.Clone(from)
	if next == nil {
		next = map[string]uint64{}
	}
	prog := c.progress(read, 0)
	var n uint64
	for i, name := range c.plan.names {
		end := until[name]
		if end == 0 || next[name] > end {
			continue
		}
		left := uint64(0)
		if budget > 0 {
			if n >= budget {
				return n, next, false, nil
			}
			left = budget - n
		}
		sp := scanSpec{stream: name, prefix: central.ArchivePrefix, from: next[name], last: end, subjects: subjects, max: left}
		if sp.from == 0 {
			sp.since = since
		}
		var lastSeq uint64
		k, err := scanStream(ctx, c.js, sp, func(r record) error {
			lastSeq = r.streamSeq
			return c.take(ctx, r)
		}, prog(i))
		n += k
		if err != nil {
			return n, next, false, err
		}
		if left > 0 && k >= left && lastSeq < end {
			next[name] = lastSeq + 1
			return n, next, false, nil
		}
		next[name] = end + 1
	}
	return n, next, true, nil
}

// readStoresAgain reads each store marked again, alone, from the start of
// its logs' trees to where the pass's read ended, and takes what that read
// established in place of what the pass's read took of it.
func (v *verifier) readStoresAgain(ctx context.Context, p *plan) error {
	for i := 0; i < len(v.again); i++ {
		id := v.again[i]
		var docs []logDoc
		if sd, ok := v.saved.storeDoc(id); ok && isSubset(sd.Keys, rosterKeys(v, id)) {
			docs = sd.Logs // keys only added: what they verified stands
		}
		c := v.child(id, false, docs)
		st, cst := v.stores[id], c.stores[id]
		cst.answer = st.answer
		c.mergeAnswer(ctx, cst)
		n, _, _, err := c.readRange(ctx, []string{central.ArchiveSubject(id)}, nil, p.ends, c.since(), 0, ReadAgain)
		v.rep.Reread += n
		if err != nil {
			return err
		}
		for lid, lg := range st.logs {
			if clg := cst.logs[lid]; clg != nil {
				clg.witnessed = max(clg.witnessed, lg.witnessed)
			}
		}
		cst.again = false
		v.stores[id] = cst
		v.needLog = append(v.needLog, c.needLog...)
	}
	return nil
}

func (st *stateDoc) storeDoc(id string) (storeDoc, bool) {
	if st == nil {
		return storeDoc{}, false
	}
	sd, ok := st.Stores[id]
	return sd, ok
}

// isSubset says whether every key of a is in b.
func isSubset(a, b []string) bool {
	for _, k := range a {
		if !slices.Contains(b, k) {
			return false
		}
	}
	return true
}

// stateDoc is the state the pass leaves for the next: the archives as
// the plan and the read left them, each store of the roster with its
// logs, and the rolling re-check's place.
func (v *verifier) stateDoc() *stateDoc {
	d := &stateDoc{Streams: map[string]streamDoc{}, Stores: map[string]storeDoc{}, Saved: v.o.Now().UTC()}
	if v.saved != nil {
		d.Passes, d.Witness = v.saved.Passes, v.saved.Witness
		maps.Copy(d.Streams, v.saved.Streams)
		d.LastCycleRecords, d.LastCycleSeconds = v.saved.LastCycleRecords, v.saved.LastCycleSeconds
		d.Recheck = v.saved.Recheck
	}
	d.Passes++
	for _, name := range v.plan.gone {
		delete(d.Streams, name)
	}
	maps.Copy(d.Streams, v.plan.docs)
	if v.plan.witness != nil {
		d.Witness = v.plan.witness
	}
	inRoster := map[string]bool{}
	for _, id := range v.o.Roster.Stores {
		inRoster[id] = true
	}
	for id, st := range v.stores {
		if inRoster[id] {
			d.Stores[id] = storeToDoc(v, st)
		}
	}
	v.recheckToDoc(d)
	return d
}

// storeToDoc is st as the state keeps it, bounded: past MaxSavedLeaves
// the oldest leaves of no log are counted as before any log.
func storeToDoc(v *verifier, st *storeState) storeDoc {
	if n := len(st.orphans) - MaxSavedLeaves; n > 0 {
		for _, l := range st.orphans[:n] {
			st.before.add(l.Seq)
			st.dropped = max(st.dropped, l.Seq)
		}
		st.orphans = st.orphans[n:]
	}
	sd := storeDoc{Keys: rosterKeys(v, st.id), Before: spanDoc{N: st.before.n, From: st.before.from, To: st.before.to},
		Orphans: encodeLeaves(st.orphans), Dropped: st.dropped}
	for _, lg := range st.order {
		sd.Logs = append(sd.Logs, logToDoc(lg))
	}
	return sd
}
