package audit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// The rolling re-check. A pass reads only what the archives gained, and
// finds a change below that by the archive's identity, its counts and its
// last record (plan). What those cannot see, a record changed where it
// lies (an edit of the server's files), the re-check finds: each pass
// reads RecheckBudget records again, store after store in turn, each
// store's records from its logs' anchors up to where the pass that began
// its re-check had read, in a verifier of its own that compares them with
// every signed checkpoint there and with what the state verified, and
// names what differs. A store's re-check may span passes: where it stands
// is in the state.

// recheckRun is a re-check under way.
type recheckRun struct {
	doc recheckDoc
	c   *verifier
}

// cycle is the round of re-checks: the store the last one was of, what
// the round read so far and since when, and what the last whole round
// read and how long it took.
type cycle struct {
	after       string
	records     uint64
	started     time.Time
	lastRecords uint64
	lastSeconds float64
	done        []string
}

// runRecheck spends the pass's re-check budget.
func (v *verifier) runRecheck(ctx context.Context, p *plan) error {
	if v.o.RecheckBudget < 0 {
		return nil
	}
	budget := uint64(v.o.RecheckBudget)
	if s := v.saved; s != nil {
		v.cyc = cycle{after: s.RecheckAfter, records: s.Cycle, started: s.CycleStarted, lastRecords: s.LastCycleRecords, lastSeconds: s.LastCycleSeconds}
		if s.Recheck != nil {
			v.rc = v.resumeRecheck(*s.Recheck)
		}
	}
	visited := map[string]bool{}
	var read uint64
	for read < budget {
		if v.rc == nil {
			id := v.nextRecheck(visited)
			if id == "" {
				break
			}
			v.rc = v.startRecheck(id, p)
		}
		visited[v.rc.doc.Store] = true
		c := v.rc.c
		n, next, done, err := c.readStore(ctx, v.rc.doc.Store, v.rc.doc.From, v.rc.doc.Until, c.since(v.rc.doc.Store), budget-read, ReadRecheck)
		read += n
		v.rc.doc.From, v.rc.doc.Read, v.cyc.records = next, v.rc.doc.Read+n, v.cyc.records+n
		if err != nil {
			return err
		}
		if !done {
			break
		}
		if err := v.finishRecheck(ctx); err != nil {
			return err
		}
	}
	v.rep.Rechecked = read
	v.rep.Recheck = &RecheckState{Store: v.cyc.after, Done: v.cyc.done, CycleRecords: v.cyc.records, CycleStarted: v.cyc.started,
		LastCycleRecords: v.cyc.lastRecords, LastCycleSeconds: v.cyc.lastSeconds}
	if v.rc != nil {
		v.rep.Recheck.Store = v.rc.doc.Store
	}
	return nil
}

// nextRecheck is the store after the last re-checked, in store order, with
// a log verified to re-check; past the last store the round begins
// again. "" when there is none, or it was re-checked in this pass.
func (v *verifier) nextRecheck(visited map[string]bool) string {
	var ids []string
	for id, st := range v.stores {
		if st.again || len(v.o.Roster.Keys(id)) == 0 {
			continue
		}
		for _, lg := range st.order {
			if lg.good.Size > lg.anchor.tree.Size {
				ids = append(ids, id)
				break
			}
		}
	}
	slices.Sort(ids)
	if len(ids) == 0 {
		return ""
	}
	now := v.o.Now()
	if v.cyc.started.IsZero() {
		v.cyc.started = now
	}
	i, _ := slices.BinarySearch(ids, v.cyc.after+"\x00")
	if i == len(ids) {
		// A round ended: every store was re-checked once.
		v.cyc.lastRecords, v.cyc.lastSeconds = v.cyc.records, now.Sub(v.cyc.started).Seconds()
		v.cyc.records, v.cyc.started, i = 0, now, 0
	}
	if visited[ids[i]] {
		return ""
	}
	return ids[i]
}

// startRecheck begins the re-check of a store: its logs start again at
// their anchors, and must reach the roots the state verified.
func (v *verifier) startRecheck(id string, p *plan) *recheckRun {
	rc := &recheckRun{doc: recheckDoc{Store: id, From: map[string]uint64{}, Until: maps.Clone(p.ends)}}
	rc.c = v.child(id, true, nil)
	cst := rc.c.stores[id]
	for _, lg := range v.stores[id].order {
		if lg.good.Size == 0 {
			continue
		}
		root := lg.good.Root()
		rc.doc.Targets = append(rc.doc.Targets, rootDoc{Log: lg.id, Size: lg.good.Size, Root: root[:]})
		clg := newLog(id, lg.id, lg.first)
		clg.good, clg.anchor = lg.good.Clone(), anchor{tree: lg.anchor.tree.Clone(), at: lg.anchor.at}
		clg.restart()
		clg.ats = map[uint64]time.Time{}
		cst.insert(clg)
	}
	if p.minAge > 0 {
		rc.c.anchorEdge = v.o.Now().Add(-p.minAge + v.o.AnchorLead)
	}
	return rc
}

// resumeRecheck takes up the re-check the state holds where it stopped.
func (v *verifier) resumeRecheck(doc recheckDoc) *recheckRun {
	if st := v.stores[doc.Store]; st == nil || st.again {
		return nil
	}
	rc := &recheckRun{doc: doc, c: v.child(doc.Store, true, nil)}
	cst := rc.c.stores[doc.Store]
	for _, d := range doc.Logs {
		lg, err := logFromDoc(doc.Store, d)
		if err != nil {
			continue // validated when the state was read
		}
		lg.floor = lg.first + uint64(lg.anchor.tree.Size)
		lg.ats = map[uint64]time.Time{}
		for _, t := range doc.Targets {
			if t.Log == lg.id {
				lg.ref = t.Size
			}
		}
		cst.insert(lg)
	}
	if v.plan.minAge > 0 {
		rc.c.anchorEdge = v.o.Now().Add(-v.plan.minAge + v.o.AnchorLead)
	}
	return rc
}

// finishRecheck concludes a store's re-check (what it found is in the
// report), and moves each log's anchor on to the one the re-check
// proposes when the log matched what the state verified.
func (v *verifier) finishRecheck(ctx context.Context) error {
	rc := v.rc
	st, cst := v.stores[rc.doc.Store], rc.c.stores[rc.doc.Store]
	v.agedOut(st, cst)
	if err := rc.c.conclude(ctx, v.plan.names, rc.doc.Until); err != nil {
		return err
	}
	for _, t := range rc.doc.Targets {
		clg, mlg := cst.logs[t.Log], st.logs[t.Log]
		if clg == nil || mlg == nil || clg.candidate == nil {
			continue
		}
		if clg.good.Size >= t.Size && clg.diverged == 0 && clg.broken == "" &&
			clg.candidate.tree.Size > mlg.anchor.tree.Size && clg.candidate.tree.Size <= mlg.good.Size {
			mlg.anchor = *clg.candidate
		}
	}
	v.cyc.after, v.cyc.done, v.rc = rc.doc.Store, append(v.cyc.done, rc.doc.Store), nil
	return nil
}

// agedOut lets go of the re-check of a log none of whose leaves from its
// anchor on the archive holds any more, when the archive lets records age
// out: its max_age took them before a re-check moved the anchor on (the
// budget is small for the archive). The main pass checked that the
// archive's first sequence moved by its max_age alone; the log's later
// re-checks start from the tree the state verified.
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

// recheckToDoc keeps the re-check's place in the state.
func (v *verifier) recheckToDoc(d *stateDoc) {
	if v.o.RecheckBudget < 0 || v.rep.Recheck == nil {
		return // nothing re-checked: the saved place stands
	}
	d.RecheckAfter, d.Cycle, d.CycleStarted = v.cyc.after, v.cyc.records, v.cyc.started
	d.LastCycleRecords, d.LastCycleSeconds = v.cyc.lastRecords, v.cyc.lastSeconds
	d.Recheck = nil
	if rc := v.rc; rc != nil {
		doc := rc.doc
		doc.Logs = nil
		for _, lg := range rc.c.stores[doc.Store].order {
			doc.Logs = append(doc.Logs, logToDoc(lg))
		}
		d.Recheck = &doc
	}
}
