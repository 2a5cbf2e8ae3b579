package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
)

// storeState is one store's logs (those a roster key of the store signed
// a checkpoint of, nothing else) and the leaves no log of it holds.
type storeState struct {
	id    string
	logs  map[string]*logState
	order []*logState // by first, then id
	// before counts the movements before any log of the store, or of a
	// store with no key (those are never a log's).
	before span
	// orphans are leaves of no log known yet, in the order read; dropped
	// is the highest sequence of one let go to bound them.
	orphans []ledger.Leaf
	dropped uint64
	keyless bool
	keys    note.Verifiers
	answer  *command.LedgerResult
	// again marks a store read again after the pass's read (its records
	// are no longer taken by it): a roster key changed, or leaves were
	// let go that a log found later needs.
	again bool
}

// span counts sequences and the range they fall in.
type span struct{ n, from, to uint64 }

func (s *span) add(seq uint64) {
	if s.n == 0 || seq < s.from {
		s.from = seq
	}
	s.to = max(s.to, seq)
	s.n++
}

// verifier is one pass, or one store's re-read within it (a rebuild, a
// re-check). It is used by one goroutine.
type verifier struct {
	o      Options
	js     jetstream.JetStream
	stores map[string]*storeState
	rep    *Report
	only   map[string]bool
	// tally holds what anyone who may write to the streams can make at
	// will, counted, not listed one by one.
	tally *tally
	// needLog are the findings listed before their log was known.
	needLog []int
	// keep: the pass has a state, so what it cannot settle yet (a hole
	// no checkpoint covers yet) waits for the next pass.
	keep bool
	// quiet: a re-read of records an earlier read took (a re-check): what
	// that read reported of the records themselves is not repeated.
	quiet bool
	// again lists the stores to read again after the pass's read.
	again []string
	// anchorEdge, in a re-check, is the time from which a leaf's record is
	// far enough from the archive's retention for the tree there to be a
	// log's anchor.
	anchorEdge time.Time
	// reread: the records this verifier takes were counted by the pass's
	// read (a store read again, a re-check).
	reread bool
	// plan is the pass's plan of the archives; rc its re-check under way
	// and cyc the round of re-checks.
	plan *plan
	rc   *recheckRun
	cyc  cycle
	// diagnose lists the mismatches whose archive leaves were let go.
	diagnose []diagWant
	// saved is the state the pass started from (nil: none).
	saved *stateDoc
	// repeats are the records of sequences already folded into a tree,
	// to compare once the read is done (the pass's and its children's).
	repeats *repeatHold
}

func newVerifier(o Options, js jetstream.JetStream, rep *Report) *verifier {
	return &verifier{o: o, js: js, stores: map[string]*storeState{}, rep: rep, tally: newTally(o.Roster.Stores), repeats: &repeatHold{}}
}

func (v *verifier) wanted(store string) bool { return v.only == nil || v.only[store] }

func (v *verifier) store(id string) *storeState {
	st := v.stores[id]
	if st == nil {
		st = &storeState{id: id, logs: map[string]*logState{}, keyless: len(v.o.Roster.Keys(id)) == 0}
		v.stores[id] = st
	}
	return st
}

// verifiers are the keys a checkpoint of st may be signed with: the
// roster's for the store, and the witness's.
func (st *storeState) verifiers(v *verifier) note.Verifiers {
	if st.keys == nil {
		st.keys = verifiers(v.o.Roster, st.id, v.o.Witness)
	}
	return st.keys
}

// findSigned records a finding about what a store signed (a fork, a
// checkpoint its next one names that the archive lacks): a re-check,
// which reads again what a pass already reported, does not repeat it.
func (v *verifier) findSigned(f Finding) {
	if !v.quiet {
		v.find(f)
	}
}

// find records a finding, listing it while MaxListed allows.
func (v *verifier) find(f Finding) {
	v.rep.Counts[f.Kind]++
	v.list(f)
}

// list lists a finding while MaxListed allows, and counts it as one more
// finding not listed when not.
func (v *verifier) list(f Finding) {
	if len(v.rep.Findings) >= v.o.MaxListed {
		v.rep.MoreFindings++
		return
	}
	if f.needsLog {
		v.needLog = append(v.needLog, len(v.rep.Findings))
	}
	v.rep.Findings = append(v.rep.Findings, f)
}

func (v *verifier) note(s string) { v.rep.Notes = append(v.rep.Notes, s) }

// take is what the pass does with one archive record: a checkpoint goes to
// its log when a roster key of its store signed it; a movement's payload
// is checked against its digest and its leaf goes into its log's tree.
func (v *verifier) take(ctx context.Context, r record) error {
	if !v.wanted(r.store) {
		return nil
	}
	st := v.store(r.store)
	if st.again {
		return nil
	}
	if r.token != "" {
		v.checkpoint(ctx, st, r)
		return nil
	}
	if !v.reread {
		v.rep.Movements++
	}
	l, ok := leafOf(r.h)
	if !ok {
		if !v.quiet {
			v.tally.add(Finding{Store: r.store, Kind: KindAltered,
				Detail: fmt.Sprintf("archive record %s:%d has no usable sequence, key or digest", r.stream, r.streamSeq)}, "a movement without a usable sequence, key or digest")
		}
		return nil
	}
	if r.data != nil && !payloadMatches(l, r.data) {
		v.find(Finding{Store: r.store, Kind: KindAltered, From: l.Seq, To: l.Seq, Detail: "the payload does not match its digest", needsLog: true})
	}
	lg := st.logAt(l.Seq)
	if lg == nil {
		v.orphan(st, l)
		return nil
	}
	if lg.ats != nil {
		if _, ok := lg.ats[l.Seq]; !ok {
			lg.ats[l.Seq] = r.at
		}
		if !v.anchorEdge.IsZero() && r.at.Before(v.anchorEdge) {
			lg.aging = true
		}
	}
	v.addLeaf(ctx, lg, l)
	return nil
}

// orphan holds a leaf no log of its store is known for yet: a log whose
// first signed checkpoint comes later takes it. A store with no key has
// no log: its leaves are only counted.
func (v *verifier) orphan(st *storeState, l ledger.Leaf) {
	if st.keyless {
		st.before.add(l.Seq)
		return
	}
	st.orphans = append(st.orphans, l)
	if len(st.orphans) > v.o.MaxBuffered {
		n := len(st.orphans) / 2
		for _, o := range st.orphans[:n] {
			st.before.add(o.Seq)
			st.dropped = max(st.dropped, o.Seq)
		}
		st.orphans = slices.Clone(st.orphans[n:])
	}
}

// logAt is the log of st that sequence seq belongs to: the last to start
// at or before it; nil when none does.
func (st *storeState) logAt(seq uint64) *logState {
	var lg *logState
	for _, c := range st.order {
		if c.first > seq {
			break
		}
		lg = c
	}
	return lg
}

// logOf is c's log, made when new; nil when c contradicts its log's first
// sequence (reported as a fork). c must be signed by a roster key of its
// store: only such a checkpoint makes a log.
func (v *verifier) logOf(ctx context.Context, st *storeState, c ledger.Checkpoint) *logState {
	lg := st.logs[c.Log]
	if lg == nil {
		lg = newLog(st.id, c.Log, c.First)
		v.place(ctx, st, lg)
	}
	if lg.first != c.First {
		v.findSigned(Finding{Store: st.id, Log: c.Log, Kind: KindForked, Sizes: []int64{c.Size},
			Detail: fmt.Sprintf("a signed checkpoint says the log starts at sequence %d, another at %d", c.First, lg.first)})
		return nil
	}
	return lg
}

// place puts a new log among its store's, by first sequence, and gives it
// the leaves read before it was known: those held as no log's, and those
// the log before it holds from its first on. When the log before it has
// already folded such leaves into its tree, or leaves of it were let go,
// the store is read again after the pass's read.
func (v *verifier) place(ctx context.Context, st *storeState, lg *logState) {
	i := st.insert(lg)
	end := ^uint64(0)
	if i+1 < len(st.order) {
		end = st.order[i+1].first
	}
	var moved []ledger.Leaf
	if i > 0 {
		prev := st.order[i-1]
		if prev.first+uint64(prev.tree.Size) > lg.first && prev.size() > 0 {
			v.readAgain(st, fmt.Sprintf("log %s starts at sequence %d, inside the leaves log %s already holds", lg.id, lg.first, prev.id))
			return
		}
		if cut := lg.first - prev.first - uint64(prev.tree.Size); cut < uint64(len(prev.pend)) {
			moved = append(moved, prev.pend[cut:]...)
			prev.pend = slices.Clone(prev.pend[:cut])
		}
		for s, l := range prev.ahead {
			if s >= lg.first {
				moved = append(moved, l)
				delete(prev.ahead, s)
			}
		}
	}
	kept := st.orphans[:0]
	for _, l := range st.orphans {
		if l.Seq >= lg.first && l.Seq < end {
			moved = append(moved, l)
		} else {
			kept = append(kept, l)
		}
	}
	st.orphans = kept
	if st.dropped >= lg.first {
		v.readAgain(st, fmt.Sprintf("more leaves before log %s's first checkpoint than are held", lg.id))
		return
	}
	slices.SortFunc(moved, func(a, b ledger.Leaf) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, l := range moved {
		v.addLeaf(ctx, lg, l)
	}
}

// insert puts lg among st's logs, by first sequence, then id; it returns
// its place.
func (st *storeState) insert(lg *logState) int {
	i, _ := slices.BinarySearchFunc(st.order, lg, func(a, b *logState) int {
		return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.id, b.id))
	})
	st.order = slices.Insert(st.order, i, lg)
	st.logs[lg.id] = lg
	return i
}

// readAgain marks a store to be read again, alone, once the pass's read
// is done.
func (v *verifier) readAgain(st *storeState, why string) {
	if st.again {
		return
	}
	st.again = true
	v.again = append(v.again, st.id)
	v.note(fmt.Sprintf("store %s is read again: %s", st.id, why))
}

// checkpoint takes a record under a checkpoint token: a checkpoint that a
// roster key of its store signed goes to its log, whatever its id says;
// anything else is tallied, and chooses nothing.
func (v *verifier) checkpoint(ctx context.Context, st *storeState, r record) {
	s, err := ledger.OpenMessage(r.store, r.token, r.data, st.verifiers(v))
	claimed, size, cerr := ledger.ParseCheckpointMsgID(r.token)
	var sizes []int64
	if cerr == nil {
		sizes = []int64{size}
	}
	if err != nil {
		if !v.quiet {
			v.tally.add(Finding{Store: r.store, Log: claimed, Kind: KindUnverifiedCheckpoint, Sizes: sizes,
				Detail: fmt.Sprintf("archive record %s:%d: %s", r.stream, r.streamSeq, unverifiedReason(err))}, unverifiedReason(err))
		}
		return
	}
	if s.Misnamed && !v.quiet {
		v.tally.add(Finding{Store: r.store, Log: s.Log, Kind: KindAltered, Sizes: []int64{size, s.Size},
			Detail: fmt.Sprintf("archive record %s:%d: a signed checkpoint of size %d under a message id naming log %s size %d", r.stream, r.streamSeq, s.Size, claimed, size)},
			"a signed checkpoint under another id")
	}
	if !v.reread {
		v.rep.Checkpoints++
	}
	v.signed(ctx, st, s)
}

// unverifiedReason says, for the report, why a record under a checkpoint
// token is not a signed checkpoint of its store.
func unverifiedReason(err error) string {
	switch {
	case errors.Is(err, ledger.ErrNotCheckpointID):
		return "its id is not a checkpoint message id"
	case errors.Is(err, ledger.ErrMalformed):
		return "not a checkpoint message"
	default:
		return "not signed by a roster key of the store"
	}
}

// signed takes a checkpoint a roster key of its store signed: its log's
// first sequence, its consistency with the log's previous checkpoint in
// the archive, its root.
func (v *verifier) signed(ctx context.Context, st *storeState, s ledger.Signed) {
	c, msg := s.Checkpoint, s.Message
	lg := v.logOf(ctx, st, c)
	if lg == nil {
		return
	}
	lg.checkpoints++
	lg.signed = max(lg.signed, c.Size)
	if v.o.Witness != nil && hasSig(s.Note, v.o.Witness) {
		lg.witnessed = max(lg.witnessed, c.Size)
	}
	if p := lg.last; p != nil {
		switch {
		case msg.PrevSize == p.Size:
			if err := ledger.CheckConsistency(msg.Proof, p.Size, p.Root, c.Size, c.Root); err != nil {
				v.findSigned(Finding{Store: st.id, Log: c.Log, Kind: KindForked, Sizes: []int64{p.Size, c.Size},
					Detail: fmt.Sprintf("the store signed a checkpoint of size %d that does not extend its checkpoint of size %d", c.Size, p.Size)})
				v.fork(lg, c)
				return
			}
		case msg.PrevSize > p.Size && c.Size > p.Size:
			v.findSigned(Finding{Store: st.id, Log: c.Log, Kind: KindCheckpointMissing, Sizes: []int64{p.Size, msg.PrevSize, c.Size},
				Detail: fmt.Sprintf("the checkpoint of size %d follows one of size %d that the archive does not hold (its last before is size %d)", c.Size, msg.PrevSize, p.Size)})
		case c.Size == p.Size && c.Root != p.Root:
			v.findSigned(Finding{Store: st.id, Log: c.Log, Kind: KindForked, Sizes: []int64{c.Size},
				Detail: fmt.Sprintf("two signed checkpoints of size %d with different roots", c.Size)})
			v.fork(lg, c)
			return
		}
	}
	if lg.last == nil || c.Size >= lg.last.Size {
		cc := c
		lg.last = &cc
	}
	lg.latest = max(lg.latest, c.Size)
	v.signedRoot(lg, c.Size, c.Root, "a checkpoint of the archive")
}

// fork sets a forked checkpoint aside: its root is compared with nothing.
func (v *verifier) fork(lg *logState, c ledger.Checkpoint) {
	if lg.forked == nil {
		lg.forked = map[int64]ledger.Hash{}
	}
	lg.forked[c.Size] = c.Root
	if r, ok := lg.roots[c.Size]; ok && r == c.Root {
		delete(lg.roots, c.Size)
		lg.nextRoot = minKey(lg.roots)
	}
	if d := lg.diag; d != nil && d.size == c.Size && d.root == c.Root {
		// Compared before it was known to be a fork (the store's own
		// answer gave it first): compared with nothing after all.
		lg.diag = nil
		v.settleRoots(lg)
	}
}

// askLatest asks each store for its latest checkpoint.
func (v *verifier) askLatest(ctx context.Context) {
	if v.o.Asker == nil {
		v.note("no store was asked for its latest checkpoint: a central that dropped the newest checkpoints is not caught")
		return
	}
	stores := v.sortedStores()
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	sem := make(chan struct{}, askConcurrency)
	for i, st := range stores {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rctx, cancel := context.WithTimeout(ctx, v.o.Timeout)
			res, err := v.o.Asker.Ledger(rctx, st.id, command.LedgerArgs{})
			cancel()
			if errs[i] = err; err == nil {
				st.answer = &res
			}
		}()
	}
	wg.Wait()
	for i, st := range stores {
		if errs[i] != nil {
			v.note(fmt.Sprintf("store %s did not answer for its latest checkpoint: it is not compared", st.id))
		}
	}
}

// askConcurrency is how many stores are asked at once.
const askConcurrency = 16

func (v *verifier) sortedStores() []*storeState {
	out := make([]*storeState, 0, len(v.stores))
	for _, st := range v.stores {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *storeState) int { return cmp.Compare(a.id, b.id) })
	return out
}

// mergeAnswers adds the stores' latest checkpoints to their logs, before
// the archive is read, so that the tree is compared with them as it
// passes their sizes.
func (v *verifier) mergeAnswers(ctx context.Context) {
	for _, st := range v.sortedStores() {
		v.mergeAnswer(ctx, st)
	}
}

func (v *verifier) mergeAnswer(ctx context.Context, st *storeState) {
	if st.answer == nil || st.answer.Checkpoint == "" {
		return
	}
	_, c, err := ledger.Open([]byte(st.answer.Checkpoint), verifiers(v.o.Roster, st.id, nil))
	if err != nil || c.Store != st.id {
		v.find(Finding{Store: st.id, Kind: KindBadSignature, Detail: "the store's own latest checkpoint is not signed by a roster key of the store"})
		return
	}
	lg := v.logOf(ctx, st, c)
	if lg == nil {
		return
	}
	lg.storeCp, lg.storePub = &c, st.answer.Published
	v.signedRoot(lg, c.Size, c.Root, "the store's own latest checkpoint")
}

// readWitness reads the witness's countersigned checkpoints from sequence
// from (0: the start) to last.
func (v *verifier) readWitness(ctx context.Context, from, last uint64) error {
	var subjects []string
	for _, s := range v.o.Stores {
		subjects = append(subjects, central.WitnessSubject(s))
	}
	_, err := scanPrefix(ctx, v.js, v.o.WitnessStream, central.WitnessPrefix, from, last, subjects, false, func(r record) error {
		if !v.wanted(r.store) {
			return nil
		}
		n, c, err := ledger.Open(r.data, verifiers(v.o.Roster, r.store, v.o.Witness))
		if err != nil || c.Store != r.store || !hasSig(n, v.o.Witness) {
			v.tally.add(Finding{Store: r.store, Kind: KindBadSignature,
				Detail: fmt.Sprintf("witness stream record %s:%d is not a checkpoint signed by a roster key of its store and the witness key", r.stream, r.streamSeq)}, "witness stream")
			return nil
		}
		lg := v.logOf(ctx, v.store(r.store), c)
		if lg == nil {
			return nil
		}
		lg.witnessed = max(lg.witnessed, c.Size)
		v.signedRoot(lg, c.Size, c.Root, "a countersigned checkpoint")
		return nil
	}, nil)
	return err
}
