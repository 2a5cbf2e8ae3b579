package audit

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/streams"
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
	// DefaultRecheckBudget is the records a pass with a state re-reads
	// for the rolling re-check.
	DefaultRecheckBudget = 1_000_000
	// DefaultAnchorLead is how long before the archive's retention lets
	// go of a log's first leaves a re-check starts the log's later
	// re-checks from a tree it verified further on.
	DefaultAnchorLead = 30 * 24 * time.Hour
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
	// MaxBuffered bounds the leaves held per log in a pass: those after a
	// missing one, and those since the last signed root (past it the
	// older half is folded into the tree, and the next signed root is
	// compared from there); and per store those read before their log's
	// first checkpoint (past it the oldest are counted as before any log,
	// and a log found later that needs them has its store read again).
	// Default DefaultMaxBuffered.
	MaxBuffered int
	// MaxSnapshots bounds the signed roots per log kept until the leaves
	// reach their sizes (the rest are checked through the consistency
	// proofs): past it, every other of the older ones is let go, the
	// newest 16 always kept. Default DefaultMaxSnapshots.
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

	// State, when set, keeps the verification's place between passes
	// (FileState; head office's service keeps it in its database): a pass
	// reads only what the archives gained since the state's, checks that
	// nothing below it changed, re-checks RecheckBudget records verified
	// before, and saves the new state when it ends. Without it Verify
	// verifies the archives whole and keeps nothing. A state covers every
	// store: it cannot be used with Stores.
	State StateStore
	// RecheckBudget bounds the records a pass with a State re-reads for
	// the rolling re-check, which sweeps the archives in their order.
	// Default DefaultRecheckBudget; negative: none.
	RecheckBudget int64
	// AnchorLead: once a log's first leaves are within AnchorLead of
	// leaving the archive (its max_age), a re-check keeps a tree it
	// verified further on to start the log's later re-checks from.
	// Default DefaultAnchorLead.
	AnchorLead time.Duration
}

// The reads of the archive, as Progress names them. A pass reads each
// archive once, whole, from where the last pass stopped (from the start
// without a state): every checkpoint's signature and proof, every
// payload's digest, every leaf into its log's tree. Only where it must,
// it reads one store's records again: a store whose roster keys changed
// or whose leaves it could not hold (ReadAgain), the leaves around a root
// that differs once they were let go (ReadDiagnose); and with a state,
// the rolling re-check (ReadRecheck).
const (
	ReadArchive  = "verifying the archive"
	ReadAgain    = "reading a store's records again"
	ReadDiagnose = "naming what changed"
	ReadRecheck  = "re-checking what was verified"
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
	if o.RecheckBudget == 0 {
		o.RecheckBudget = DefaultRecheckBudget
	}
	if o.AnchorLead <= 0 {
		o.AnchorLead = DefaultAnchorLead
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
	// KindArchiveRewritten is an archive that changed below what an
	// earlier pass verified: created again, shorter, records deleted, its
	// first sequence moved other than by its max_age, its max_age
	// shortened, or a record verified before read back different. The
	// pass then verifies every log again from where its tree starts
	// (its anchor), against what was verified, and names what changed.
	KindArchiveRewritten = "archive_rewritten"
)

// Finding is one thing verify found, named by store, log, sequences and
// checkpoint sizes.
type Finding struct {
	Store string `json:"store"`
	// Stream is the archive a finding of the archive itself is about
	// (KindArchiveRewritten).
	Stream string `json:"stream,omitempty"`
	Log    string `json:"log,omitempty"`
	Kind   string `json:"kind"`
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

// Report is the result of Verify: of one pass, with a state.
type Report struct {
	Streams []string `json:"streams"`
	// Records counts the archive records the pass read for the first
	// time; Movements and Checkpoints are among them.
	Records   uint64 `json:"records"`
	Movements uint64 `json:"movements"`
	// Checkpoints counts the records that are checkpoints signed by a
	// roster key of their store; the other records under checkpoint
	// tokens are Counts[KindUnverifiedCheckpoint].
	Checkpoints uint64 `json:"checkpoints"`
	// Rechecked counts the records the rolling re-check read again, and
	// Reread those read again to rebuild a store or name what changed.
	Rechecked uint64 `json:"rechecked"`
	Reread    uint64 `json:"reread,omitempty"`
	// Incremental says the pass started from a saved state; Positions say
	// where each archive's read started and ended.
	Incremental bool          `json:"incremental,omitempty"`
	Positions   []Position    `json:"positions,omitempty"`
	Recheck     *RecheckState `json:"recheck,omitempty"`
	Stores      int           `json:"stores"`
	// Logs are every log's standing after the pass: with a state, what
	// every pass so far established.
	Logs         []LogReport `json:"logs"`
	Findings     []Finding   `json:"findings"`
	MoreFindings int         `json:"more_findings,omitempty"`
	// Counts are the findings by kind, whole: a finding that stands for
	// several records (Count) counts each.
	Counts  map[string]int `json:"counts"`
	Notes   []string       `json:"notes,omitempty"`
	Seconds float64        `json:"seconds"`
}

// Position is where a pass read an archive: from its sequence From (0:
// nothing new) to To, the archive's last when the pass began.
type Position struct {
	Stream  string `json:"stream"`
	From    uint64 `json:"from"`
	To      uint64 `json:"to"`
	Records uint64 `json:"records"`
}

// RecheckState is where the rolling re-check stands after a pass: the
// sweep under way (how many records it read, since when, and where it
// reads each archive next), whether one ended in this pass, and what the
// last whole sweep read and how long it took.
type RecheckState struct {
	SweepRecords     uint64            `json:"sweep_records,omitempty"`
	SweepStarted     time.Time         `json:"sweep_started,omitzero"`
	At               map[string]uint64 `json:"at,omitempty"`
	Ended            bool              `json:"ended,omitempty"`
	LastSweepRecords uint64            `json:"last_sweep_records,omitempty"`
	LastSweepSeconds float64           `json:"last_sweep_seconds,omitempty"`
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

// Verify checks the stores' logs against the archives: one pass. Without
// o.State it reads the archives whole; with it, it reads what they gained
// since the state's pass, after checking that nothing below changed,
// re-checks a budget of what earlier passes verified, and saves the new
// state. It fails only when the archives cannot be read or the state
// cannot be read or saved; everything found is in the Report. A pass
// that fails saves nothing: the next starts from the last saved state.
func Verify(ctx context.Context, o Options) (*Report, error) {
	if o.Roster == nil || o.Conn == nil {
		return nil, errors.New("audit: verify needs a connection and the roster")
	}
	if o.State != nil && o.Stores != nil {
		return nil, errors.New("audit: a verification that keeps a state covers every store: verify some stores without --state")
	}
	o = o.withDefaults()
	start := o.Now()
	js, err := newJetStream(o.Conn, o.APIPrefix)
	if err != nil {
		return nil, err
	}
	v := newVerifier(o, js, &Report{Counts: map[string]int{}})
	if o.State != nil {
		v.keep = true
		if v.saved, err = loadState(ctx, o.State); err != nil {
			return nil, err
		}
		v.rep.Incremental = v.saved != nil
	}
	if err := v.pass(ctx); err != nil {
		return nil, err
	}
	v.rep.Seconds = o.Now().Sub(start).Seconds()
	if o.State != nil {
		b, err := encodeState(v.stateDoc())
		if err != nil {
			return nil, err
		}
		if err := o.State.Save(ctx, b); err != nil {
			return nil, err
		}
	}
	return v.rep, nil
}

func newJetStream(nc *nats.Conn, prefix string) (jetstream.JetStream, error) {
	if prefix != "" {
		return jetstream.NewWithAPIPrefix(nc, prefix)
	}
	return jetstream.New(nc)
}

// pass is one pass: the stores asked, the archives checked for what
// changed below the state's place, read from there, the stores that need
// it read again, what the read left settled, and the rolling re-check.
func (v *verifier) pass(ctx context.Context) error {
	o := v.o
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
	if err := v.restore(); err != nil {
		return err
	}
	names, err := streams.Archives(ctx, v.js, o.Archives)
	if err != nil {
		return err
	}
	v.rep.Streams = names
	// Ask first, then fix the archive's end: a checkpoint a store says
	// central acknowledged is then in what the read sees, but for the
	// archive's sourcing lag (Grace).
	v.askLatest(ctx)
	v.mergeAnswers(ctx)
	p, err := v.planArchives(ctx, names)
	if err != nil {
		return err
	}
	v.plan = p
	if o.Witness != nil {
		if err := v.readWitnessFrom(ctx, p); err != nil {
			return err
		}
	}
	if err := v.read(ctx, p); err != nil {
		return err
	}
	if err := v.readStoresAgain(ctx, p); err != nil {
		return err
	}
	if err := v.conclude(ctx, p.names, p.ends); err != nil {
		return err
	}
	if o.State != nil {
		if err := v.runRecheck(ctx, p); err != nil {
			return err
		}
	}
	v.report()
	return nil
}
