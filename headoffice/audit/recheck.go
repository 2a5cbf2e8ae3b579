package audit

import (
	"context"
	"fmt"
	"maps"
	"time"
)

// The rolling re-check. A pass reads only what the archives gained, and
// finds a change below that by the archive's identity, its counts and its
// last record (planArchives). What those cannot see, a record changed
// where it lies (an edit of the server's files), the re-check finds: a
// sweep reads the archives again in order, RecheckBudget records a pass,
// from their start (or a little before the oldest anchor) up to where they
// were verified when the sweep began, in a verifier of its own that holds
// every log of the roster's stores started again at its anchor; it
// compares the trees with every signed checkpoint it passes, and at its
// end with what the state verified when it began, and names what differs.
// A sweep may span passes: its trees and where it reads are in the state.
// It reads the archives in their order, as the pass's own read does: a
// read of one store's subject at a time would make the server scan all of
// an archive whose stores' records are interleaved, for each store.

// recheckRun is a sweep under way.
type recheckRun struct {
	doc recheckDoc
	c   *verifier
}

// cycle is what the last whole sweep read and how long it took, and
// whether a sweep ended in this pass.
type cycle struct {
	lastRecords uint64
	lastSeconds float64
	done        bool
}

// runRecheck spends the pass's re-check budget on the sweep under way, or
// on a new one.
func (v *verifier) runRecheck(ctx context.Context, p *plan) error {
	if v.o.RecheckBudget < 0 {
		return nil
	}
	if s := v.saved; s != nil {
		v.cyc = cycle{lastRecords: s.LastCycleRecords, lastSeconds: s.LastCycleSeconds}
		if s.Recheck != nil {
			v.rc = v.resumeRecheck(*s.Recheck)
		}
	}
	if v.rc == nil {
		v.rc = v.startRecheck(p)
	}
	if v.rc != nil {
		c := v.rc.c
		n, next, done, err := c.readRange(ctx, nil, v.rc.doc.From, v.rc.doc.Until, c.since(), uint64(v.o.RecheckBudget), ReadRecheck)
		v.rep.Rechecked = n
		v.rc.doc.From, v.rc.doc.Read = next, v.rc.doc.Read+n
		if err != nil {
			return err
		}
		if done {
			if err := v.finishRecheck(ctx); err != nil {
				return err
			}
		}
	}
	v.rep.Recheck = &RecheckState{Ended: v.cyc.done, LastSweepRecords: v.cyc.lastRecords, LastSweepSeconds: v.cyc.lastSeconds}
	if rc := v.rc; rc != nil {
		v.rep.Recheck.SweepRecords, v.rep.Recheck.SweepStarted = rc.doc.Read, rc.doc.Started
		v.rep.Recheck.At = maps.Clone(rc.doc.From)
	}
	return nil
}

// rosterStores is the set of the roster's stores.
func (v *verifier) rosterStores() map[string]bool {
	out := map[string]bool{}
	for _, id := range v.o.Roster.Stores {
		out[id] = true
	}
	return out
}

// startRecheck begins a sweep: every log of the roster's stores starts
// again at its anchor, and must reach the root the state verified. nil
// when no log has anything verified past its anchor.
func (v *verifier) startRecheck(p *plan) *recheckRun {
	rc := &recheckRun{doc: recheckDoc{From: map[string]uint64{}, Until: maps.Clone(p.ends), Started: v.o.Now().UTC()}}
	rc.c = v.newChild(true, v.rosterStores())
	for _, st := range v.sortedStores() {
		if st.again || !rc.c.wanted(st.id) {
			continue
		}
		cst := rc.c.store(st.id)
		for _, lg := range st.order {
			clg := newLog(st.id, lg.id, lg.first)
			clg.good, clg.anchor = lg.good.Clone(), anchor{tree: lg.anchor.tree.Clone(), at: lg.anchor.at}
			clg.restart()
			clg.ats = map[uint64]time.Time{}
			cst.insert(clg)
			if lg.good.Size > lg.anchor.tree.Size {
				root := lg.good.Root()
				rc.doc.Targets = append(rc.doc.Targets, rootDoc{Store: st.id, Log: lg.id, Size: lg.good.Size, Root: root[:]})
			}
		}
	}
	if len(rc.doc.Targets) == 0 {
		return nil
	}
	v.edge(rc.c)
	return rc
}

// edge sets the time from which a leaf's record is far enough from the
// archives' retention for the tree there to be an anchor.
func (v *verifier) edge(c *verifier) {
	if v.plan.minAge > 0 {
		c.anchorEdge = v.o.Now().Add(-v.plan.minAge + v.o.AnchorLead)
	}
}

// resumeRecheck takes up the sweep the state holds where it stopped.
func (v *verifier) resumeRecheck(doc recheckDoc) *recheckRun {
	rc := &recheckRun{doc: doc, c: v.newChild(true, v.rosterStores())}
	ref := map[[2]string]int64{}
	for _, t := range doc.Targets {
		ref[[2]string{t.Store, t.Log}] = t.Size
	}
	for id, sd := range doc.Stores {
		cst := rc.c.store(id)
		for _, d := range sd.Logs {
			lg, err := logFromDoc(id, d)
			if err != nil {
				continue // validated when the state was read
			}
			lg.floor = lg.first + uint64(lg.anchor.tree.Size)
			lg.ats = map[uint64]time.Time{}
			lg.ref = ref[[2]string{id, lg.id}]
			cst.insert(lg)
		}
		cst.before = span{n: sd.Before.N, from: sd.Before.From, to: sd.Before.To}
		cst.orphans, _ = decodeLeaves(sd.Orphans)
		cst.dropped = sd.Dropped
	}
	v.edge(rc.c)
	return rc
}

// finishRecheck concludes a sweep (what it found is in the report), and
// moves each log's anchor on to the one the sweep proposes when the log
// matched what the state verified.
func (v *verifier) finishRecheck(ctx context.Context) error {
	rc := v.rc
	for id, cst := range rc.c.stores {
		if st := v.stores[id]; st != nil {
			v.agedOut(st, cst)
		}
	}
	if err := rc.c.conclude(ctx, v.plan.names, rc.doc.Until); err != nil {
		return err
	}
	for _, t := range rc.doc.Targets {
		cst, st := rc.c.stores[t.Store], v.stores[t.Store]
		if cst == nil || st == nil {
			continue
		}
		clg, mlg := cst.logs[t.Log], st.logs[t.Log]
		if clg == nil || mlg == nil || clg.candidate == nil {
			continue
		}
		if clg.good.Size >= t.Size && clg.diverged == 0 && clg.broken == "" &&
			clg.candidate.tree.Size > mlg.anchor.tree.Size && clg.candidate.tree.Size <= mlg.good.Size {
			mlg.anchor = *clg.candidate
		}
	}
	v.cyc = cycle{lastRecords: rc.doc.Read, lastSeconds: v.o.Now().Sub(rc.doc.Started).Seconds(), done: true}
	v.rc = nil
	return nil
}

// agedOut lets go of the re-check of a log none of whose leaves from its
// anchor on the archive holds any more, when the archive lets records age
// out: its max_age took them before a sweep moved the anchor on (the
// budget is small for the archive). The pass checked that the archive's
// first sequence moved by its max_age alone; the log's later re-checks
// start from the tree the state verified.
func (v *verifier) agedOut(st, cst *storeState) {
	if v.plan.minAge <= 0 {
		return
	}
	for _, clg := range cst.order {
		mlg := st.logs[clg.id]
		if mlg == nil || clg.size() > clg.anchor.tree.Size || clg.ref == 0 {
			continue
		}
		clg.ref, clg.roots, clg.nextRoot, clg.ahead = 0, nil, 0, nil
		mlg.anchor = anchor{tree: mlg.good.Clone()}
		v.note(fmt.Sprintf("store %s log %s: its leaves from sequence %d aged out of the archive before a re-check moved its anchor on: its next re-checks start at size %d (a larger re-check budget re-checks more of the archive's retention)",
			clg.store, clg.id, clg.floor, mlg.good.Size))
	}
}

// recheckToDoc keeps the sweep's place in the state.
func (v *verifier) recheckToDoc(d *stateDoc) {
	if v.rep.Recheck == nil {
		return // nothing re-checked: the saved place stands
	}
	d.LastCycleRecords, d.LastCycleSeconds = v.cyc.lastRecords, v.cyc.lastSeconds
	d.Recheck = nil
	if rc := v.rc; rc != nil {
		doc := rc.doc
		doc.Stores = map[string]storeDoc{}
		for id, cst := range rc.c.stores {
			doc.Stores[id] = storeToDoc(v, cst)
		}
		d.Recheck = &doc
	}
}
