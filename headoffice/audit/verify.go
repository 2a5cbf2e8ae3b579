package audit

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/provision"
)

// Asker asks a store for its latest checkpoint and leaves; *fleet.Client
// is one.
type Asker interface {
	Ledger(ctx context.Context, store string, a command.LedgerArgs) (command.LedgerResult, error)
}

// Defaults of Options.
const (
	DefaultTimeout      = 10 * time.Second
	DefaultGrace        = 5 * time.Minute
	DefaultMaxBuffered  = 1 << 20
	DefaultMaxSnapshots = 4096
	DefaultMaxListed    = 200
	DefaultMaxDiagnose  = 100_000
)

// Options configure Verify.
type Options struct {
	// Conn reads the archives (ordered consumers, and message gets by
	// sequence) and, with Witness, the witness stream.
	Conn *nats.Conn
	// APIPrefix is the JetStream API prefix of Conn's account; empty
	// means $JS.API.
	APIPrefix string
	// Archives names the archives to read, those that exist; nil lists
	// the server's streams and reads every archive.
	Archives []string
	// Stores limits the check to these stores; nil means every store of
	// the roster or the archive.
	Stores []string
	// Roster is each store's verifier keys.
	Roster *provision.Roster
	// Witness, when set, is head office's witness key: its
	// countersignatures are checked, and the checkpoints it countersigned
	// (WitnessStream) are compared with the archive too.
	Witness       note.Verifier
	WitnessStream string // default central.WitnessStreamName
	// Asker asks each store for its latest checkpoint and, to name what
	// changed, its leaves; nil asks nobody.
	Asker Asker
	// Timeout bounds each request to a store. Default DefaultTimeout.
	Timeout time.Duration
	// Grace: a store's latest checkpoint signed less than Grace ago may
	// not be archived yet, and is not missing. Default DefaultGrace.
	Grace time.Duration
	// MaxBuffered bounds the leaves held per log that arrive ahead of a
	// missing one. Default DefaultMaxBuffered.
	MaxBuffered int
	// MaxSnapshots bounds the signed checkpoint sizes per log at which
	// the archive's root is kept and compared (the rest are checked
	// through the consistency proofs): past it, every other of the older
	// ones is let go, the newest 16 always kept. Default
	// DefaultMaxSnapshots.
	MaxSnapshots int
	// MaxListed bounds the findings listed; counts are whole. Default
	// DefaultMaxListed.
	MaxListed int
	// MaxDiagnose bounds the sequences compared leaf by leaf with the
	// store's where a root does not match. Default DefaultMaxDiagnose.
	MaxDiagnose uint64
	// Progress, when set, is called now and then with the read, the
	// records read and the records the archives held.
	Progress func(read string, done, total uint64)
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// The reads of the archive, as Progress names them: the first, whole,
// checks every checkpoint's signature and proof and every payload's
// digest; the second, headers only, rebuilds the trees; the third, only
// where a root differs, names what changed.
const (
	ReadRecords  = "checking signatures and payloads"
	ReadVerify   = "rebuilding the trees"
	ReadDiagnose = "naming what changed"
)

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = DefaultMaxBuffered
	}
	if o.MaxSnapshots < 16 {
		o.MaxSnapshots = DefaultMaxSnapshots
	}
	if o.MaxListed <= 0 {
		o.MaxListed = DefaultMaxListed
	}
	if o.MaxDiagnose == 0 {
		o.MaxDiagnose = DefaultMaxDiagnose
	}
	if o.WitnessStream == "" {
		o.WitnessStream = central.WitnessStreamName
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Kinds of finding.
const (
	KindMissing           = "missing"   // a leaf a checkpoint covers is not in the archive
	KindAltered           = "altered"   // a record differs from what the store logged
	KindReordered         = "reordered" // a record sits at another sequence than the store logged it
	KindForked            = "forked"    // two checkpoints of a log that no one tree satisfies
	KindBadSignature      = "bad_signature"
	KindCheckpointMissing = "checkpoint_missing_centrally"
	// KindUncovered is archived movements no checkpoint covers: after a
	// log's last checkpoint (a store that is gone, or whose newest
	// movements are not signed yet), or before any log of the store
	// starts (movements older than the ledger). It is reported, and is
	// not a failure.
	KindUncovered = "uncovered"
	// KindUnverifiedCheckpoint is archive records under a checkpoint
	// token that are not a checkpoint signed by a roster key of their
	// store: unsigned, signed by another store's or an unknown key, not a
	// checkpoint message, not a checkpoint id. Anyone who may write to
	// the streams can make them; none is selected or compared. They are
	// counted per store, the first few listed with where they are.
	KindUnverifiedCheckpoint = "unverified_checkpoint"
)

// Finding is one thing verify found, named by store, log, sequences and
// checkpoint sizes.
type Finding struct {
	Store string `json:"store"`
	Log   string `json:"log,omitempty"`
	Kind  string `json:"kind"`
	// From..To are the store sequences concerned (0 when none).
	From uint64 `json:"from,omitempty"`
	To   uint64 `json:"to,omitempty"`
	// Sizes are the checkpoint sizes concerned: for a record that did
	// not verify, the size its id claims.
	Sizes []int64 `json:"sizes,omitempty"`
	// Count, when set, is how many records the finding stands for: the
	// rest of a store's records of a kind anyone who may write to the
	// streams can make at will, past the first few listed one by one.
	Count  uint64 `json:"count,omitempty"`
	Detail string `json:"detail"`
	// needsLog marks a finding of a movement whose log the first read
	// did not know yet; it is named once the logs are.
	needsLog bool
}

// LogReport is what verify established of one log.
type LogReport struct {
	Store string `json:"store"`
	Log   string `json:"log"`
	First uint64 `json:"first"`
	// Leaves is how many of the log's leaves, from First on, the archive
	// holds in an unbroken run.
	Leaves int64 `json:"leaves"`
	// Checkpoints counts the log's checkpoints in the archive; Latest is
	// the largest size among those whose signature verified.
	Checkpoints uint64 `json:"checkpoints"`
	Latest      int64  `json:"latest"`
	// StoreLatest is the size of the store's own latest checkpoint.
	StoreLatest int64 `json:"store_latest,omitempty"`
	// Witnessed is the largest size the witness countersigned.
	Witnessed int64 `json:"witnessed,omitempty"`
	// Matched is the largest checkpoint size whose root the archive's
	// leaves give (every smaller one is its prefix, by the proofs).
	Matched int64 `json:"matched"`
	// Repeats counts records of a sequence already in the tree (an agent's
	// resend after central's dedupe horizon), not compared with the first.
	Repeats uint64 `json:"repeats,omitempty"`
}

// Report is the result of Verify.
type Report struct {
	Streams   []string `json:"streams"`
	Records   uint64   `json:"records"`
	Movements uint64   `json:"movements"`
	// Checkpoints counts the records that are checkpoints signed by a
	// roster key of their store; the other records under checkpoint
	// tokens are Counts[KindUnverifiedCheckpoint].
	Checkpoints  uint64      `json:"checkpoints"`
	Stores       int         `json:"stores"`
	Logs         []LogReport `json:"logs"`
	Findings     []Finding   `json:"findings"`
	MoreFindings int         `json:"more_findings,omitempty"`
	// Counts are the findings by kind, whole: a finding that stands for
	// several records (Count) counts each.
	Counts  map[string]int `json:"counts"`
	Notes   []string       `json:"notes,omitempty"`
	Seconds float64        `json:"seconds"`
}

// OK says all holds: no finding but uncovered movements.
func (r *Report) OK() bool {
	for k, n := range r.Counts {
		if k != KindUncovered && n > 0 {
			return false
		}
	}
	return true
}

// logState is one log's verification.
type logState struct {
	store, id string
	first     uint64

	sizes    []int64 // sizes to keep the archive's root at (cps's), sorted
	nextSnap int
	snap     map[int64]ledger.Hash
	// cps are the roots signed at sizes, not forked: at most
	// MaxSnapshots (thinRoots).
	cps map[int64]ledger.Hash

	tree   ledger.Frontier
	next   uint64 // first + tree.Size
	buf    map[uint64]ledger.Hash
	broken bool

	last        *ledger.Checkpoint // latest verified, in archive order
	forked      map[int64]ledger.Hash
	signed      int64 // the largest size of a checkpoint signed by the store in the archive, forked or not
	checkpoints uint64
	latest      int64
	storeCp     *ledger.Checkpoint
	storePub    bool
	witnessed   int64
	repeats     uint64
	leafMax     uint64 // highest sequence seen
}

// storeState is one store's logs: those a roster key of the store
// signed a checkpoint of, nothing else.
type storeState struct {
	id     string
	logs   map[string]*logState
	order  []*logState                  // by first
	before struct{ n, from, to uint64 } // movements before any log
	answer *command.LedgerResult
}

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
}

// Verify checks the stores' logs against the archives. It fails only
// when the archives cannot be read; everything found is in the Report.
func Verify(ctx context.Context, o Options) (*Report, error) {
	if o.Roster == nil || o.Conn == nil {
		return nil, errors.New("audit: verify needs a connection and the roster")
	}
	o = o.withDefaults()
	start := o.Now()
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
	v := &verifier{o: o, js: js, stores: map[string]*storeState{}, rep: &Report{Counts: map[string]int{}},
		tally: newTally(o.Roster.Stores)}
	if o.Stores != nil {
		v.only = map[string]bool{}
		for _, s := range o.Stores {
			v.only[s] = true
		}
	}
	for _, s := range o.Roster.Stores {
		if v.wanted(s) {
			v.store(s)
		}
	}
	for _, s := range o.Stores {
		v.store(s)
	}
	names, err := archiveStreams(ctx, js, o.Archives)
	if err != nil {
		return nil, err
	}
	v.rep.Streams = names
	// Ask first, then fix the archive's end: a checkpoint a store says
	// central acknowledged is then in what the reads see, but for the
	// archive's sourcing lag (Grace).
	v.askLatest(ctx)
	last, total, err := snapshotLast(ctx, js, names)
	if err != nil {
		return nil, err
	}
	var subjects []string
	for _, s := range o.Stores {
		subjects = append(subjects, central.ArchiveSubject(s))
	}
	if err := v.readRecords(ctx, names, last, subjects, total); err != nil {
		return nil, err
	}
	if o.Witness != nil {
		if err := v.readWitness(ctx); err != nil {
			return nil, err
		}
	}
	v.mergeAnswers()
	v.prepare()
	if err := v.readTrees(ctx, names, last, subjects, total); err != nil {
		return nil, err
	}
	if err := v.conclude(ctx, names, last); err != nil {
		return nil, err
	}
	v.report()
	v.rep.Seconds = o.Now().Sub(start).Seconds()
	return v.rep, nil
}

func (v *verifier) wanted(store string) bool { return v.only == nil || v.only[store] }

func (v *verifier) store(id string) *storeState {
	st := v.stores[id]
	if st == nil {
		st = &storeState{id: id, logs: map[string]*logState{}}
		v.stores[id] = st
	}
	return st
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

func (v *verifier) progress(read string, total uint64) func(int) func(uint64) {
	var base, done uint64
	lastStream := -1
	return func(stream int) func(uint64) {
		return func(n uint64) {
			if stream != lastStream {
				base, lastStream = done, stream
			}
			done = base + n
			if v.o.Progress != nil {
				v.o.Progress(read, done, total)
			}
		}
	}
}

// askLatest asks each store for its latest checkpoint.
func (v *verifier) askLatest(ctx context.Context) {
	if v.o.Asker == nil {
		v.rep.Notes = append(v.rep.Notes, "no store was asked for its latest checkpoint: a central that dropped the newest checkpoints is not caught")
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
			v.rep.Notes = append(v.rep.Notes, fmt.Sprintf("store %s did not answer for its latest checkpoint: it is not compared", st.id))
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

// mergeAnswers adds the stores' latest checkpoints to their logs.
func (v *verifier) mergeAnswers() {
	for _, st := range v.sortedStores() {
		if st.answer == nil || st.answer.Checkpoint == "" {
			continue
		}
		_, c, err := ledger.Open([]byte(st.answer.Checkpoint), verifiers(v.o.Roster, st.id, nil))
		if err != nil || c.Store != st.id {
			v.find(Finding{Store: st.id, Kind: KindBadSignature, Detail: "the store's own latest checkpoint is not signed by a roster key of the store"})
			continue
		}
		lg := v.logOf(st, c)
		if lg == nil {
			continue
		}
		lg.storeCp, lg.storePub = &c, st.answer.Published
		v.addRoot(lg, c, "the store's own latest checkpoint")
	}
}

// prepare readies the trees for the second read, once every signed
// checkpoint is known: each log's sizes to keep the archive's root at,
// each store's logs in order, and the log of each movement listed before
// its log was known.
func (v *verifier) prepare() {
	for _, st := range v.stores {
		st.order = st.order[:0]
		for _, lg := range st.logs {
			lg.sizes = slices.Sorted(maps.Keys(lg.cps))
			lg.next = lg.first
			lg.snap = map[int64]ledger.Hash{}
			st.order = append(st.order, lg)
		}
		slices.SortFunc(st.order, func(a, b *logState) int { return cmp.Compare(a.first, b.first) })
	}
	for _, i := range v.needLog {
		f := &v.rep.Findings[i]
		if lg := v.logAt(v.store(f.Store), f.From); lg != nil {
			f.Log = lg.id
		}
	}
	v.needLog = nil
}

// logAt is the log of st that sequence seq belongs to: the last to start
// at or before it; nil when none does.
func (v *verifier) logAt(st *storeState, seq uint64) *logState {
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
func (v *verifier) logOf(st *storeState, c ledger.Checkpoint) *logState {
	lg := st.logs[c.Log]
	if lg == nil {
		lg = &logState{store: st.id, id: c.Log, first: c.First, cps: map[int64]ledger.Hash{}}
		st.logs[c.Log] = lg
	}
	if lg.first != c.First {
		v.find(Finding{Store: st.id, Log: c.Log, Kind: KindForked, Sizes: []int64{c.Size},
			Detail: fmt.Sprintf("a signed checkpoint says the log starts at sequence %d, another at %d", c.First, lg.first)})
		return nil
	}
	return lg
}

// addRoot records a signed root at its size; two at one size are a fork.
// A checkpoint already set aside as forked is compared with nothing.
func (v *verifier) addRoot(lg *logState, c ledger.Checkpoint, what string) {
	if r, ok := lg.forked[c.Size]; ok && r == c.Root {
		return
	}
	if r, ok := lg.cps[c.Size]; ok {
		if r != c.Root {
			v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindForked, Sizes: []int64{c.Size},
				Detail: fmt.Sprintf("%s and another signed checkpoint give size %d two roots", what, c.Size)})
		}
		return
	}
	lg.cps[c.Size] = c.Root
	if len(lg.cps) > v.o.MaxSnapshots {
		thinRoots(lg.cps)
	}
}

// thinRoots lets go of every other of the older sizes of cps, keeping the
// newest 16: the newest root decides whether the log holds (the proofs
// chain every earlier one to it); the older ones only narrow down where a
// difference lies.
func thinRoots(cps map[int64]ledger.Hash) {
	sizes := slices.Sorted(maps.Keys(cps))
	old := sizes[:max(0, len(sizes)-16)]
	for i, s := range old {
		if i%2 == 1 {
			delete(cps, s)
		}
	}
}

// readWitness reads the witness's countersigned checkpoints.
func (v *verifier) readWitness(ctx context.Context) error {
	st, err := v.js.Stream(ctx, v.o.WitnessStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		v.rep.Notes = append(v.rep.Notes, "the witness stream "+v.o.WitnessStream+" does not exist: no checkpoint is countersigned")
		return nil
	}
	if err != nil {
		return fmt.Errorf("audit: stream %s: %w", v.o.WitnessStream, err)
	}
	last := st.CachedInfo().State.LastSeq
	var subjects []string
	for _, s := range v.o.Stores {
		subjects = append(subjects, central.WitnessSubject(s))
	}
	_, err = scanPrefix(ctx, v.js, v.o.WitnessStream, central.WitnessPrefix, 0, last, subjects, false, func(r record) error {
		if !v.wanted(r.store) {
			return nil
		}
		n, c, err := ledger.Open(r.data, verifiers(v.o.Roster, r.store, v.o.Witness))
		if err != nil || c.Store != r.store || !hasSig(n, v.o.Witness) {
			v.tally.add(Finding{Store: r.store, Kind: KindBadSignature,
				Detail: fmt.Sprintf("witness stream record %s:%d is not a checkpoint signed by a roster key of its store and the witness key", r.stream, r.streamSeq)}, "witness stream")
			return nil
		}
		lg := v.logOf(v.store(r.store), c)
		if lg == nil {
			return nil
		}
		lg.witnessed = max(lg.witnessed, c.Size)
		v.addRoot(lg, c, "a countersigned checkpoint")
		return nil
	}, nil)
	return err
}

// readRecords is the first read, whole: every checkpoint's signature
// and proof, every payload's digest. Only a checkpoint a roster key of its
// store signed makes or extends a log; every other record under a
// checkpoint token is tallied.
func (v *verifier) readRecords(ctx context.Context, names []string, last lastSeqs, subjects []string, total uint64) error {
	prog := v.progress(ReadRecords, total)
	for i, name := range names {
		n, err := scan(ctx, v.js, name, last[name], subjects, false, func(r record) error {
			if !v.wanted(r.store) {
				return nil
			}
			if r.token != "" {
				v.checkpoint(r)
				return nil
			}
			v.rep.Movements++
			v.payload(r)
			return nil
		}, prog(i))
		v.rep.Records += n
		if err != nil {
			return err
		}
	}
	return nil
}

// checkpoint takes a record under a checkpoint token: a checkpoint that a
// roster key of its store signed goes to its log, whatever its id says;
// anything else is tallied, and chooses nothing.
func (v *verifier) checkpoint(r record) {
	s, err := ledger.OpenMessage(r.store, r.token, r.data, verifiers(v.o.Roster, r.store, v.o.Witness))
	claimed, size, cerr := ledger.ParseCheckpointMsgID(r.token)
	var sizes []int64
	if cerr == nil {
		sizes = []int64{size}
	}
	if err != nil {
		v.tally.add(Finding{Store: r.store, Log: claimed, Kind: KindUnverifiedCheckpoint, Sizes: sizes,
			Detail: fmt.Sprintf("archive record %s:%d: %s", r.stream, r.streamSeq, unverifiedReason(err))}, unverifiedReason(err))
		return
	}
	if s.Misnamed {
		v.tally.add(Finding{Store: r.store, Log: s.Log, Kind: KindAltered, Sizes: []int64{size, s.Size},
			Detail: fmt.Sprintf("archive record %s:%d: a signed checkpoint of size %d under a message id naming log %s size %d", r.stream, r.streamSeq, s.Size, claimed, size)},
			"a signed checkpoint under another id")
	}
	v.rep.Checkpoints++
	v.signed(v.store(r.store), s)
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
func (v *verifier) signed(st *storeState, s ledger.Signed) {
	c, msg := s.Checkpoint, s.Message
	lg := v.logOf(st, c)
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
				v.find(Finding{Store: st.id, Log: c.Log, Kind: KindForked, Sizes: []int64{p.Size, c.Size},
					Detail: fmt.Sprintf("the store signed a checkpoint of size %d that does not extend its checkpoint of size %d", c.Size, p.Size)})
				lg.fork(c)
				return
			}
		case msg.PrevSize > p.Size && c.Size > p.Size:
			v.find(Finding{Store: st.id, Log: c.Log, Kind: KindCheckpointMissing, Sizes: []int64{p.Size, msg.PrevSize, c.Size},
				Detail: fmt.Sprintf("the checkpoint of size %d follows one of size %d that the archive does not hold (its last before is size %d)", c.Size, msg.PrevSize, p.Size)})
		case c.Size == p.Size && c.Root != p.Root:
			v.find(Finding{Store: st.id, Log: c.Log, Kind: KindForked, Sizes: []int64{c.Size},
				Detail: fmt.Sprintf("two signed checkpoints of size %d with different roots", c.Size)})
			lg.fork(c)
			return
		}
	}
	if lg.last == nil || c.Size >= lg.last.Size {
		cc := c
		lg.last = &cc
	}
	lg.latest = max(lg.latest, c.Size)
	v.addRoot(lg, c, "a checkpoint of the archive")
}

// fork sets a forked checkpoint aside: its root is compared with nothing.
func (lg *logState) fork(c ledger.Checkpoint) {
	if lg.forked == nil {
		lg.forked = map[int64]ledger.Hash{}
	}
	lg.forked[c.Size] = c.Root
	if r, ok := lg.cps[c.Size]; ok && r == c.Root {
		delete(lg.cps, c.Size)
	}
}

// payload checks a movement's payload against its digest. A record with
// no usable leaf is tallied: anyone who may write to the streams can make
// them at will.
func (v *verifier) payload(r record) {
	l, ok := leafOf(r.h)
	if !ok {
		v.tally.add(Finding{Store: r.store, Kind: KindAltered,
			Detail: fmt.Sprintf("archive record %s:%d has no usable sequence, key or digest", r.stream, r.streamSeq)}, "a movement without a usable sequence, key or digest")
		return
	}
	if !payloadMatches(l, r.data) {
		v.find(Finding{Store: r.store, Kind: KindAltered, From: l.Seq, To: l.Seq, Detail: "the payload does not match its digest", needsLog: true})
	}
}

// readTrees is the second read, headers only: every movement's leaf into
// its log's tree, the root kept at each signed checkpoint's size.
func (v *verifier) readTrees(ctx context.Context, names []string, last lastSeqs, subjects []string, total uint64) error {
	prog := v.progress(ReadVerify, total)
	for i, name := range names {
		_, err := scan(ctx, v.js, name, last[name], subjects, true, func(r record) error {
			if v.wanted(r.store) && r.token == "" {
				v.leaf(ctx, r)
			}
			return nil
		}, prog(i))
		if err != nil {
			return err
		}
	}
	return nil
}

// leaf puts a movement's leaf into its log's tree; a movement before any
// log of its store is counted.
func (v *verifier) leaf(ctx context.Context, r record) {
	l, ok := leafOf(r.h)
	if !ok {
		return // tallied by the first read
	}
	st := v.store(r.store)
	lg := v.logAt(st, l.Seq)
	if lg == nil {
		b := &st.before
		if b.n == 0 || l.Seq < b.from {
			b.from = l.Seq
		}
		b.to = max(b.to, l.Seq)
		b.n++
		return
	}
	lg.leafMax = max(lg.leafMax, l.Seq)
	v.add(ctx, lg, l.Seq, l.Hash())
}

// add puts a leaf into its log's tree, or holds it until the ones before
// it come.
func (v *verifier) add(ctx context.Context, lg *logState, seq uint64, h ledger.Hash) {
	switch {
	case lg.broken:
		return
	case seq < lg.next:
		lg.repeats++
		return
	case seq > lg.next:
		if lg.buf == nil {
			lg.buf = map[uint64]ledger.Hash{}
		}
		if old, ok := lg.buf[seq]; ok {
			if old != h {
				v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindAltered, From: seq, To: seq, Detail: "two different records of one sequence"})
			}
			lg.repeats++
			return
		}
		lg.buf[seq] = h
		if len(lg.buf) > v.o.MaxBuffered {
			v.fillGap(ctx, lg)
		}
		return
	}
	v.append(lg, h)
	v.drain(lg)
}

func (v *verifier) append(lg *logState, h ledger.Hash) {
	lg.tree.Append(h)
	lg.next++
	for lg.nextSnap < len(lg.sizes) && lg.sizes[lg.nextSnap] < lg.tree.Size {
		lg.nextSnap++
	}
	if lg.nextSnap < len(lg.sizes) && lg.sizes[lg.nextSnap] == lg.tree.Size {
		lg.snap[lg.tree.Size] = lg.tree.Root()
	}
}

func (v *verifier) drain(lg *logState) {
	for len(lg.buf) > 0 {
		h, ok := lg.buf[lg.next]
		if !ok {
			return
		}
		delete(lg.buf, lg.next)
		v.append(lg, h)
	}
}

// fillGap settles the lowest run of sequences missing before the leaves
// held: they are missing from the archive; the store's leaves, when it
// still holds them, let the tree go on, else it is broken there.
func (v *verifier) fillGap(ctx context.Context, lg *logState) {
	low := uint64(0)
	for s := range lg.buf {
		if low == 0 || s < low {
			low = s
		}
	}
	from, to := lg.next, low-1
	v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindMissing, From: from, To: to,
		Detail: fmt.Sprintf("%d sequence(s) of the log are not in the archive", to-from+1)})
	if leaves, ok := v.storeLeaves(ctx, lg.store, from, to); ok {
		for _, l := range leaves {
			v.append(lg, l.Hash())
		}
		v.drain(lg)
		return
	}
	lg.broken, lg.buf = true, nil
	v.rep.Notes = append(v.rep.Notes, fmt.Sprintf("store %s log %s: the store does not hold sequences %d-%d: the archive's tree is not rebuilt past sequence %d, and the checkpoints above size %d are checked through their proofs only",
		lg.store, lg.id, from, to, from-1, lg.tree.Size))
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

// conclude settles what the reads left: the gaps still open, the leaves a
// checkpoint covers that never came, the roots, the stores' own latest
// checkpoints, then names what changed where a root differs.
func (v *verifier) conclude(ctx context.Context, names []string, last lastSeqs) error {
	type diag struct {
		lg       *logState
		from, to uint64
		sizes    []int64
	}
	var diags []diag
	now := v.o.Now()
	for _, st := range v.sortedStores() {
		if st.before.n > 0 {
			v.find(Finding{Store: st.id, Kind: KindUncovered, From: st.before.from, To: st.before.to,
				Detail: fmt.Sprintf("%d archived movement(s) before any log of the store starts", st.before.n)})
		}
		for _, lg := range st.order {
			for len(lg.buf) > 0 && !lg.broken {
				v.fillGap(ctx, lg)
			}
			target := lg.latest
			if r, ok := lg.forked[storeSize(lg)]; ok && r == lg.storeCp.Root {
				lg.storeCp = nil // reported as forked
			}
			if lg.storeCp != nil && lg.storePub && now.Sub(lg.storeCp.Time) >= v.o.Grace {
				target = max(target, lg.storeCp.Size)
				if lg.storeCp.Size > lg.signed {
					v.find(Finding{Store: st.id, Log: lg.id, Kind: KindCheckpointMissing, Sizes: []int64{lg.latest, lg.storeCp.Size},
						Detail: fmt.Sprintf("the store's latest checkpoint, size %d, which central acknowledged, is not in the archive (its latest there: size %d)", lg.storeCp.Size, lg.latest)})
				}
			}
			if lg.witnessed > lg.latest {
				target = max(target, lg.witnessed)
				v.find(Finding{Store: st.id, Log: lg.id, Kind: KindCheckpointMissing, Sizes: []int64{lg.latest, lg.witnessed},
					Detail: fmt.Sprintf("the witness countersigned a checkpoint of size %d that the archive does not hold (its latest there: size %d)", lg.witnessed, lg.latest)})
			}
			if !lg.broken && lg.tree.Size < target {
				v.find(Finding{Store: st.id, Log: lg.id, Kind: KindMissing, From: lg.next, To: lg.first + uint64(target) - 1,
					Detail: fmt.Sprintf("the checkpoint of size %d covers sequences the archive does not hold", target)})
			}
			if !lg.broken && lg.tree.Size > target {
				v.find(Finding{Store: st.id, Log: lg.id, Kind: KindUncovered, From: lg.first + uint64(target), To: lg.next - 1,
					Detail: "archived movements after the log's last checkpoint"})
			}
			// The roots, in size order: the last that matches and the first
			// that does not.
			sizes := make([]int64, 0, len(lg.cps))
			for s := range lg.cps {
				sizes = append(sizes, s)
			}
			slices.Sort(sizes)
			var good int64
			for _, s := range sizes {
				got, ok := lg.snap[s]
				if !ok {
					continue
				}
				if got == lg.cps[s] {
					good = s
					continue
				}
				diags = append(diags, diag{lg, lg.first + uint64(good), lg.first + uint64(s) - 1, []int64{good, s}})
				break
			}
			v.rep.Logs = append(v.rep.Logs, LogReport{Store: st.id, Log: lg.id, First: lg.first, Leaves: lg.tree.Size,
				Checkpoints: lg.checkpoints, Latest: lg.latest, StoreLatest: storeSize(lg), Witnessed: lg.witnessed, Matched: good, Repeats: lg.repeats})
		}
	}
	v.rep.Stores = len(v.stores)
	for _, d := range diags {
		if err := v.diagnose(ctx, names, last, d.lg, d.from, d.to, d.sizes); err != nil {
			return err
		}
	}
	return nil
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
			v.rep.Notes = append(v.rep.Notes, fmt.Sprintf("%d more stores have records in the archive and no key in the roster", len(keyless)-i))
			break
		}
		v.rep.Notes = append(v.rep.Notes, fmt.Sprintf("store %s has no key in the roster: none of its checkpoints could be authenticated, and its movements are checked against no log", id))
	}
}

func storeSize(lg *logState) int64 {
	if lg.storeCp == nil {
		return 0
	}
	return lg.storeCp.Size
}

// diagnose names the sequences from..to that differ between the archive
// and the store's log, where the archive's root at sizes[1] is not the
// checkpoint's: it asks the store for its leaves and reads that store's
// archive again, headers only.
func (v *verifier) diagnose(ctx context.Context, names []string, last lastSeqs, lg *logState, from, to uint64, sizes []int64) error {
	what := fmt.Sprintf("the archive's leaves do not give the root of the checkpoint of size %d (they give the one of size %d)", sizes[1], sizes[0])
	if to-from+1 > v.o.MaxDiagnose {
		v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindAltered, From: from, To: to, Sizes: sizes, Detail: what + "; too many sequences between them to compare one by one"})
		return nil
	}
	theirs, ok := v.storeLeaves(ctx, lg.store, from, to)
	if !ok {
		v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindAltered, From: from, To: to, Sizes: sizes, Detail: what + "; the store no longer holds those leaves to name which changed"})
		return nil
	}
	ours := make(map[uint64]ledger.Leaf, to-from+1)
	prog := v.progress(ReadDiagnose, 0)
	for i, name := range names {
		_, err := scan(ctx, v.js, name, last[name], []string{central.ArchiveSubject(lg.store)}, true, func(r record) error {
			if r.token != "" {
				return nil
			}
			if l, ok := leafOf(r.h); ok && l.Seq >= from && l.Seq <= to {
				if _, seen := ours[l.Seq]; !seen {
					ours[l.Seq] = l
				}
			}
			return nil
		}, prog(i))
		if err != nil {
			return err
		}
	}
	named := false
	for _, want := range theirs {
		got, ok := ours[want.Seq]
		switch {
		case !ok:
			named = true // reported as missing by the second read
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
	if !named {
		v.find(Finding{Store: lg.store, Log: lg.id, Kind: KindForked, From: from, To: to, Sizes: sizes,
			Detail: what + "; the archive's leaves there are the store's: the store signed a tree it does not hold"})
	}
	return nil
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
