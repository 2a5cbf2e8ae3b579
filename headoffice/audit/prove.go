package audit

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/headoffice/provision"
)

// ProveOptions configure Prove.
type ProveOptions struct {
	Conn      *nats.Conn
	APIPrefix string
	Archives  []string
	// Key is the movement's key (32 hex); Store, when set, limits the
	// search to that store's archive.
	Key, Store string
	// Roster is each store's verifier keys (required): the checkpoint a
	// proof rests on is chosen among those a roster key of the store
	// signed, and only among those.
	Roster *provision.Roster
	// WitnessStream is where countersigned checkpoints are looked for;
	// default central.WitnessStreamName. A countersigned checkpoint that covers
	// the movement is preferred. NoWitness does not look (an identity
	// that may not read it).
	WitnessStream string
	NoWitness     bool
	// Witness, when set, is the witness's key: only a checkpoint of the
	// witness stream that it countersigned is taken. Without it the
	// countersignature cannot be checked, and any checkpoint there that a
	// roster key of the store signed is taken.
	Witness note.Verifier
	// MaxBuffered bounds the leaves held that arrive ahead of a missing
	// one. Default DefaultMaxBuffered.
	MaxBuffered int
	Progress    func(read string, done, total uint64)
	// Note, when set, is told what does not stop the proof but should be
	// looked into: records under the store's checkpoint tokens that no
	// roster key of the store signed, passed over.
	Note func(string)
}

// ErrNotFound is matched by Prove's error when the archive does not hold
// the movement.
var ErrNotFound = errors.New("audit: the archive holds no movement of that key")

// ErrNotCovered is matched by Prove's error when no signed checkpoint
// covers the movement yet.
var ErrNotCovered = errors.New("audit: no signed checkpoint covers the movement yet")

// ErrNotInLog is matched by Prove's error when the archived movement is
// not the leaf its store's log holds at its sequence: another record of
// that sequence is, and no signed checkpoint's root comes from the
// archive's leaves with this one there. hq verify reports it as altered.
var ErrNotInLog = errors.New("audit: the movement is not the one its store logged at its sequence")

// ErrNoRoster is matched by Prove's error when it is given no roster, or
// one without a key of the movement's store: no checkpoint can then be
// authenticated, and a checkpoint no one authenticated is no proof.
var ErrNoRoster = errors.New("audit: a proof needs the store's keys from the roster: without them no checkpoint can be authenticated")

// Prove writes the inspector's proof of one movement: its payload and
// leaf, the newest checkpoint of its log that a roster key of its store
// signed and that covers it (a countersigned one when there is one), and
// its inclusion proof in that checkpoint's tree, rebuilt from the archive
// leaf by leaf. Records under checkpoint tokens that no roster key of the
// store signed choose nothing; they are counted (Note).
func Prove(ctx context.Context, o ProveOptions) (ledger.Proof, error) {
	var p ledger.Proof
	if o.Roster == nil {
		return p, ErrNoRoster
	}
	if o.WitnessStream == "" {
		o.WitnessStream = central.WitnessStreamName
	}
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = DefaultMaxBuffered
	}
	key := strings.ToLower(o.Key)
	if kb, err := hex.DecodeString(key); err != nil || len(kb) != 16 {
		return p, errors.New("audit: a movement key is 32 hex digits")
	}
	pr, err := newProver(ctx, o, key)
	if err != nil {
		return p, err
	}
	if err := pr.find(ctx); err != nil {
		return p, err
	}
	if err := pr.selectCheckpoint(ctx); err != nil {
		return p, err
	}
	if !o.NoWitness {
		if err := pr.preferWitnessed(ctx); err != nil {
			return p, err
		}
	}
	return pr.prove(ctx)
}

// prover is one Prove.
type prover struct {
	o     ProveOptions
	key   string
	js    jetstream.JetStream
	names []string
	last  lastSeqs
	total uint64

	found   *record // the movement, with its payload once read
	leaf    ledger.Leaf
	best    ledger.Checkpoint
	note    string // best's signed note
	skipped uint64 // records under checkpoint tokens that did not verify
	// signed are the checkpoints of the store's logs a roster key signed,
	// by log and size: those older than best that cover the movement are
	// what a proof falls back to (fallback).
	signed map[string]map[int64]signedCp
}

// signedCp is a checkpoint a roster key of its store signed, and its
// signed note.
type signedCp struct {
	cp   ledger.Checkpoint
	text string
}

func newProver(ctx context.Context, o ProveOptions, key string) (*prover, error) {
	var js jetstream.JetStream
	var err error
	if o.APIPrefix != "" {
		js, err = jetstream.NewWithAPIPrefix(o.Conn, o.APIPrefix)
	} else {
		js, err = jetstream.New(o.Conn)
	}
	if err != nil {
		return nil, err
	}
	names, err := streams.Archives(ctx, js, o.Archives)
	if err != nil {
		return nil, err
	}
	last, total, err := snapshotLast(ctx, js, names)
	if err != nil {
		return nil, err
	}
	return &prover{o: o, key: key, js: js, names: names, last: last, total: total}, nil
}

func (pr *prover) isMovement(r record) bool {
	return r.token == "" && central.KeyOfMsgID(r.h.Get(central.HeaderMsgID)) == pr.key
}

// find finds the movement, when no store was named, with a read of every
// archive, headers only; the store's own read (selectCheckpoint) reads
// its payload.
func (pr *prover) find(ctx context.Context) error {
	if pr.o.Store != "" {
		return nil
	}
	for _, name := range pr.names {
		_, err := scan(ctx, pr.js, name, pr.last[name], nil, true, func(r record) error {
			if pr.found == nil && pr.isMovement(r) {
				rr := r
				pr.found = &rr
			}
			return nil
		}, progressFn(pr.o.Progress, "finding the movement", pr.total))
		if err != nil {
			return err
		}
	}
	if pr.found == nil {
		return ErrNotFound
	}
	return nil
}

// selectCheckpoint reads the store's archive whole: the movement's
// payload, and every record under a checkpoint token, of which the
// Selector keeps only what a roster key of the store signed.
func (pr *prover) selectCheckpoint(ctx context.Context) error {
	store := pr.o.Store
	if pr.found != nil {
		store = pr.found.store
	}
	if len(pr.o.Roster.Keys(store)) == 0 {
		return fmt.Errorf("audit: store %s has no key in the roster (add its line, \"%s <key>\"): %w", store, store, ErrNoRoster)
	}
	sel := NewSelector(pr.o.Roster)
	var data []byte
	for _, name := range pr.names {
		_, err := scan(ctx, pr.js, name, pr.last[name], []string{central.ArchiveSubject(store)}, false, func(r record) error {
			switch {
			case r.token != "":
				c, err := sel.Add(r.store, r.token, r.data)
				if err != nil {
					pr.skipped++
					return nil
				}
				pr.keep(c)
			case pr.found == nil && pr.isMovement(r):
				rr := r
				pr.found, data = &rr, r.data
			case pr.found != nil && data == nil && r.stream == pr.found.stream && r.streamSeq == pr.found.streamSeq:
				data = r.data
			}
			return nil
		}, progressFn(pr.o.Progress, "checking the checkpoints", pr.total))
		if err != nil {
			return err
		}
	}
	if pr.skipped > 0 && pr.o.Note != nil {
		pr.o.Note(fmt.Sprintf("%d records under store %s's checkpoint tokens are not checkpoints signed by a roster key of the store: passed over (hq verify reports them)", pr.skipped, store))
	}
	if pr.found == nil || data == nil {
		return ErrNotFound
	}
	leaf, ok := leafOf(pr.found.h)
	if !ok {
		return errors.New("audit: the archived movement has no usable sequence, key or digest")
	}
	if !payloadMatches(leaf, data) {
		return errors.New("audit: the archived payload does not match its digest: run hq verify")
	}
	pr.leaf, pr.found.data = leaf, data
	best, ok := sel.Covering(store, leaf.Seq)
	if !ok {
		return ErrNotCovered
	}
	pr.best, pr.note = best.Checkpoint, best.Text
	return nil
}

// keep keeps a signed checkpoint of the store, one per log and size.
func (pr *prover) keep(c ledger.Signed) {
	if pr.signed == nil {
		pr.signed = map[string]map[int64]signedCp{}
	}
	if pr.signed[c.Log] == nil {
		pr.signed[c.Log] = map[int64]signedCp{}
	}
	if _, ok := pr.signed[c.Log][c.Size]; !ok {
		pr.signed[c.Log][c.Size] = signedCp{cp: c.Checkpoint, text: c.Text}
	}
}

// preferWitnessed takes, when the witness stream holds one, the newest
// countersigned checkpoint of the log that covers the movement, signed
// by a roster key of the store (and countersigned by Witness when it is
// set).
func (pr *prover) preferWitnessed(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	wst, err := pr.js.Stream(wctx, pr.o.WitnessStream)
	if err != nil || wst.CachedInfo().State.Msgs == 0 {
		return nil
	}
	store, seq := pr.found.store, pr.leaf.Seq
	keys := verifiers(pr.o.Roster, store, pr.o.Witness)
	var wbest *ledger.Checkpoint
	_, err = scanPrefix(ctx, pr.js, pr.o.WitnessStream, central.WitnessPrefix, 0, wst.CachedInfo().State.LastSeq, []string{central.WitnessSubject(store)}, false, func(r record) error {
		n, c, err := ledger.Open(r.data, keys)
		if err != nil || c.Store != store || c.Log != pr.best.Log || c.First != pr.best.First || seq-c.First >= uint64(c.Size) ||
			pr.o.Witness != nil && !hasSig(n, pr.o.Witness) {
			return nil
		}
		if wbest == nil || c.Size > wbest.Size {
			cc := c
			wbest, pr.note = &cc, string(r.data)
		}
		return nil
	}, nil)
	if err != nil {
		return err
	}
	if wbest != nil {
		pr.best = *wbest
	}
	return nil
}

// prove writes the proof of the movement in best, or, when the archive's
// leaves do not give best's root, in the newest older checkpoint of the
// log a roster key signed that covers the movement and whose root they
// do give (fallback). Its work is bounded: at most two reads of the
// store's archive, headers only; its memory is a frontier, an inclusion
// builder and one size and root per signed checkpoint of the log.
func (pr *prover) prove(ctx context.Context) (ledger.Proof, error) {
	b, t, err := pr.build(ctx, pr.best)
	if err != nil {
		return ledger.Proof{}, err
	}
	if t.root != pr.best.Root {
		c, ok := pr.fallback(t)
		if !ok {
			return ledger.Proof{}, pr.noRoot(t)
		}
		if pr.o.Note != nil {
			pr.o.Note(fmt.Sprintf("the proof rests on the checkpoint of size %d: the archive's leaves do not give the root of the newer checkpoint of size %d (run hq verify)", c.cp.Size, pr.best.Size))
		}
		pr.best, pr.note = c.cp, c.text
		if b, t, err = pr.build(ctx, pr.best); err != nil {
			return ledger.Proof{}, err
		}
		if t.root != pr.best.Root {
			return ledger.Proof{}, pr.noRoot(t)
		}
	}
	incl, err := b.Proof()
	if err != nil {
		return ledger.Proof{}, err
	}
	return ledger.Proof{Format: ledger.ProofFormat, Store: pr.found.store, Payload: string(pr.found.data), Leaf: ledger.LeafOf(pr.leaf),
		Index: int64(pr.leaf.Seq - pr.best.First), Inclusion: incl, Checkpoint: pr.note}, nil
}

// built is what a rebuild of the log's tree found: the root at the
// checkpoint's size, the sizes of the log's other signed checkpoints
// below it whose roots the leaves gave, and another record the archive
// holds at the movement's sequence (other, when there is one).
type built struct {
	root    ledger.Hash
	matched []int64
	other   *ledger.Leaf
}

// build reads the log's leaves up to c's size, headers only, in sequence
// order, into c's inclusion proof: the movement's own leaf at its index,
// the archive's first record of every other sequence.
func (pr *prover) build(ctx context.Context, c ledger.Checkpoint) (*ledger.InclusionBuilder, built, error) {
	var out built
	leaf := pr.leaf
	b, err := ledger.NewInclusionBuilder(c.Size, int64(leaf.Seq-c.First))
	if err != nil {
		return nil, out, err
	}
	signed := pr.signed[c.Log]
	var tree ledger.Frontier
	next, end := c.First, c.First+uint64(c.Size)
	buf := map[uint64]ledger.Hash{}
	add := func(h ledger.Hash) {
		b.Add(h)
		tree.Append(h)
		next++
		if s, ok := signed[tree.Size]; ok && tree.Size < c.Size && s.cp.First == c.First && tree.Root() == s.cp.Root {
			out.matched = append(out.matched, tree.Size)
		}
	}
	fill := func() {
		for next < end {
			if next == leaf.Seq {
				add(leaf.Hash())
				continue
			}
			h, ok := buf[next]
			if !ok {
				return
			}
			delete(buf, next)
			add(h)
		}
	}
	lacks := func() error {
		return fmt.Errorf("audit: the archive lacks sequence %d of the log: run hq verify", next)
	}
	fill()
	for _, name := range pr.names {
		_, err := scan(ctx, pr.js, name, pr.last[name], []string{central.ArchiveSubject(pr.found.store)}, true, func(r record) error {
			l, ok := leafOf(r.h)
			if r.token != "" || !ok || l.Seq < c.First || l.Seq >= end {
				return nil
			}
			if l.Seq == leaf.Seq {
				if l != leaf && out.other == nil {
					out.other = &l
				}
				return nil
			}
			if l.Seq < next {
				return nil
			}
			if _, dup := buf[l.Seq]; !dup {
				buf[l.Seq] = l.Hash()
			}
			if len(buf) > pr.o.MaxBuffered {
				return lacks()
			}
			fill()
			return nil
		}, progressFn(pr.o.Progress, "rebuilding the tree", pr.total))
		if err != nil {
			return nil, out, err
		}
	}
	if next < end {
		return nil, out, lacks()
	}
	out.root = tree.Root()
	return b, out, nil
}

// fallback is the newest signed checkpoint of the log, older than best,
// that covers the movement and whose root the leaves gave (t.matched).
func (pr *prover) fallback(t built) (signedCp, bool) {
	index := int64(pr.leaf.Seq - pr.best.First)
	for i := len(t.matched) - 1; i >= 0; i-- {
		if t.matched[i] > index {
			return pr.signed[pr.best.Log][t.matched[i]], true
		}
	}
	return signedCp{}, false
}

// noRoot is why no proof could be written: the movement is not the log's
// leaf at its sequence (another record there), or the archive's leaves
// give no signed root that covers it.
func (pr *prover) noRoot(t built) error {
	if t.other != nil {
		return fmt.Errorf("%w: movement %s is archived under sequence %d of store %s, where the archive also holds movement %s, and no checkpoint the store signed covers it there: run hq verify",
			ErrNotInLog, pr.key, pr.leaf.Seq, pr.found.store, hex.EncodeToString(t.other.Key[:]))
	}
	return fmt.Errorf("audit: the archive's leaves do not give the root of the checkpoint of size %d, nor of an older signed checkpoint that covers sequence %d: run hq verify", pr.best.Size, pr.leaf.Seq)
}

func progressFn(p func(string, uint64, uint64), read string, total uint64) func(uint64) {
	if p == nil {
		return nil
	}
	return func(n uint64) { p(read, n, total) }
}
