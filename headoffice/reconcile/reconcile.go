package reconcile

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/headoffice/fleet"
)

// Asker asks a store what it holds for sequences; *fleet.Client is one.
type Asker interface {
	Reconcile(ctx context.Context, store string, a command.ReconcileArgs) (command.ReconcileResult, error)
}

// Defaults of Options.
const (
	DefaultGrace          = 5 * time.Minute
	DefaultTimeout        = 10 * time.Second
	DefaultConcurrency    = 16
	DefaultMaxAskPerStore = 100_000
	DefaultMaxListed      = 50
	DefaultMaxFilterBytes = 4 << 30
	DefaultMaxCandidates  = 8 << 20
)

// Options configure Run.
type Options struct {
	// Conn reads the archive and the fleet view; it must be allowed to
	// list streams, read the archives with ordered consumers and direct
	// get the fleet bucket.
	Conn *nats.Conn
	// APIPrefix is the JetStream API prefix of Conn's account; empty
	// means $JS.API. The production configuration's auditor has its own
	// (central.AuditAPIPrefix).
	APIPrefix string
	// Archives names the archive streams to read, those of them that
	// exist; nil lists the server's streams (which the auditor of the
	// production configuration may not do) and reads every archive.
	Archives []string
	// Asker asks the stores with gaps; nil asks nobody, and every missing
	// sequence is unexplained (not asked).
	Asker Asker
	// Stores limits the reconciliation to these stores; nil means every
	// store in the archive or the fleet view.
	Stores []string
	// Since limits the read to the archive messages stored since then. A
	// store's sequences are then checked only from the lowest sequence of
	// an archived movement the store enqueued at or after Since+Grace
	// (sequences grow with enqueue time, so every later one was stored
	// after Since), up to its highest acknowledged; a store with no such
	// movement is not checked.
	Since time.Time
	// Grace covers the archive's sourcing lag and the clocks of stores and
	// head office: a movement a store says it synced less than Grace
	// before the read began (or after) is in transit, not missing.
	// Default DefaultGrace.
	Grace time.Duration
	// Timeout bounds each request to a store. Default DefaultTimeout.
	Timeout time.Duration
	// Concurrency is how many stores are asked at once. Default
	// DefaultConcurrency.
	Concurrency int
	// MaxAskPerStore bounds the missing sequences asked of one store; the
	// rest are unexplained (not asked). Default DefaultMaxAskPerStore.
	MaxAskPerStore uint64
	// MaxListed bounds the gaps and the conflicting keys listed per
	// store; counts are always whole. Default DefaultMaxListed.
	MaxListed int
	// MaxFilterBytes bounds the memory of the filter that finds keys
	// archived twice (16 bits per archived record up to it). Default
	// DefaultMaxFilterBytes.
	MaxFilterBytes uint64
	// MaxCandidates bounds the keys looked at again by the second pass.
	// Default DefaultMaxCandidates.
	MaxCandidates int
	// Progress, when set, is called now and then while the archive is
	// read, with the read (ReadFirst, then ReadAgain), the records read and
	// the records the archives held when the read began (an upper bound
	// for a read filtered by store).
	Progress func(read string, done, total uint64)
}

// The reads of the archive, as Progress names them.
const (
	ReadFirst = "reading the archive"
	ReadAgain = "reading again for keys archived twice"
)

// progressOf returns what readStream calls for the streams of one read,
// one after the other: it adds up their records.
func progressOf(o Options, read string, total uint64) func(stream int) func(uint64) {
	var done, base uint64
	last := -1
	return func(stream int) func(uint64) {
		return func(k uint64) {
			if stream != last {
				base, last = done, stream
			}
			done = base + k
			if o.Progress != nil {
				o.Progress(read, done, total)
			}
		}
	}
}

// Explanations and non-explanations of a missing sequence, the keys of
// StoreReport.Explained and StoreReport.Unexplained.
const (
	ExplainedPending     = "pending"
	ExplainedQuarantined = "quarantined"
	ExplainedPurged      = "purged"
	ExplainedInTransit   = "in_transit" // synced at the store within the grace of the read

	UnexplainedSynced      = "synced_not_archived" // the store says central has it; the archive does not
	UnexplainedPruned      = "unknown_pruned"      // the store no longer knows it (synced long ago)
	UnexplainedNotAssigned = "unknown_not_assigned"
	UnexplainedNoAnswer    = "no_answer"
	UnexplainedRefused     = "refused"
	UnexplainedBadAnswer   = "bad_answer" // the store answered badly
	UnexplainedNotAsked    = "not_asked"
)

// Gap is a run of missing sequences and what the store said of them.
type Gap struct {
	From      uint64 `json:"from"`
	To        uint64 `json:"to"`
	Why       string `json:"why"` // one of the Explained… or Unexplained… keys
	Reason    string `json:"reason,omitempty"`
	Explained bool   `json:"explained"`
}

// StoreReport is the reconciliation of one store.
type StoreReport struct {
	Store string `json:"store"`
	// Highest is the highest sequence the store acknowledged, from its
	// fleet summary; 0 when the fleet view has none.
	Highest uint64 `json:"highest"`
	// Checked is the range of sequences checked; nil when none was.
	Checked *Range `json:"checked,omitempty"`
	// Held counts the distinct sequences in the archive; Records the
	// archive messages read.
	Held    uint64 `json:"held"`
	Records uint64 `json:"records"`
	// Missing counts the sequences of Checked not held.
	Missing     uint64            `json:"missing"`
	Explained   map[string]uint64 `json:"explained,omitempty"`
	Unexplained map[string]uint64 `json:"unexplained,omitempty"`
	// Repeats counts extra copies of a movement (same key and digest);
	// Conflicts the sequences archived with one key and two digests;
	// SeqReused the sequences archived with two keys; Malformed the
	// records without a usable Rx-Seq or naming another store.
	Repeats   uint64 `json:"repeats"`
	Conflicts uint64 `json:"conflicts"`
	SeqReused uint64 `json:"seq_reused"`
	Malformed uint64 `json:"malformed"`
	// ConflictKeys are the first MaxListed keys in conflict.
	ConflictKeys []string `json:"conflict_keys,omitempty"`
	// Files are the store's changes of data file (a replaced PC, a
	// restored copy), each its own finding; LostWithFile counts the
	// missing sequences a replaced file gave that never reached central
	// (named there, not among the gaps).
	Files        []FileFinding `json:"files,omitempty"`
	LostWithFile uint64        `json:"lost_with_file"`
	Gaps         []Gap         `json:"gaps,omitempty"`
	MoreGaps     int           `json:"more_gaps,omitempty"`
	Notes        []string      `json:"notes,omitempty"`

	pending []Range // the gaps still to explain
}

// UnexplainedCount is the number of missing sequences not explained
// (at most the largest uint64).
func (s *StoreReport) UnexplainedCount() uint64 {
	var n uint64
	for _, v := range s.Unexplained {
		n = satAdd(n, v)
	}
	return n
}

// ExplainedCount is the number of missing sequences explained (at most
// the largest uint64).
func (s *StoreReport) ExplainedCount() uint64 {
	var n uint64
	for _, v := range s.Explained {
		n = satAdd(n, v)
	}
	return n
}

// OK reports whether nothing of the store needs someone: every missing
// sequence explained, no conflict, no reused sequence, no malformed
// record. Repeats are harmless.
func (s *StoreReport) OK() bool {
	return s.UnexplainedCount() == 0 && s.LostWithFile == 0 && s.Conflicts == 0 && s.SeqReused == 0 && s.Malformed == 0
}

// Noteworthy reports whether the store has something to say.
func (s *StoreReport) Noteworthy() bool {
	return s.Missing > 0 || s.Repeats > 0 || !s.OK() || len(s.Notes) > 0 || len(s.Files) > 0
}

// Report is a whole reconciliation.
type Report struct {
	GeneratedAt      time.Time    `json:"generated_at"`
	Since            *time.Time   `json:"since,omitempty"`
	Streams          []StreamRead `json:"streams"`
	Records          uint64       `json:"records"`
	ReadSeconds      float64      `json:"read_seconds"`
	RecordsPerSecond float64      `json:"records_per_second"`
	// The second read, of the stores with a key or a sequence that may be
	// archived twice, and the memory of the filter that chose them.
	RereadStores  int           `json:"reread_stores"`
	RereadRecords uint64        `json:"reread_records"`
	RereadSeconds float64       `json:"reread_seconds"`
	FilterBytes   uint64        `json:"filter_bytes"`
	Stores        []StoreReport `json:"stores"`
	Total         StoreReport   `json:"total"`
	Notes         []string      `json:"notes,omitempty"`
}

// OK reports whether no store needs someone. It asks every store, not
// Total: a store writes its own fleet summary, and its counts are not
// to be trusted to add up with the others'.
func (r *Report) OK() bool {
	for i := range r.Stores {
		if !r.Stores[i].OK() {
			return false
		}
	}
	return r.Total.OK()
}

func (o *Options) defaults() {
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxAskPerStore == 0 {
		o.MaxAskPerStore = DefaultMaxAskPerStore
	}
	if o.MaxListed <= 0 {
		o.MaxListed = DefaultMaxListed
	}
	if o.MaxFilterBytes == 0 {
		o.MaxFilterBytes = DefaultMaxFilterBytes
	}
	if o.MaxCandidates <= 0 {
		o.MaxCandidates = DefaultMaxCandidates
	}
}

// Run reconciles the archive with the stores.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	js, err := openJetStream(o)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	rep := newReport(began, o)
	a, err := readArchive(ctx, js, o)
	if err != nil {
		return nil, err
	}
	rep.noteRead(a, o)
	entries, err := fleet.ReadWith(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("%w: may this identity direct get %s?", err, central.FleetStreamName)
	}
	stores, inFleet := storeReports(o, entries, a.tallies)
	for id, sr := range stores {
		setChecked(o, a, sr, a.tallies[id], inFleet[id])
	}
	rep.FilterBytes = a.filterBytes
	if err := findDuplicates(ctx, js, o, a, stores, rep); err != nil {
		return nil, err
	}
	asks := findGaps(stores, a.tallies)
	explainAll(ctx, o, asks, began.Add(-o.Grace))
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep.collect(stores)
	return rep, nil
}

// openJetStream opens JetStream on o.Conn, with o.APIPrefix when set.
func openJetStream(o Options) (jetstream.JetStream, error) {
	js, err := jetstream.New(o.Conn)
	if o.APIPrefix != "" {
		js, err = jetstream.NewWithAPIPrefix(o.Conn, o.APIPrefix)
	}
	return js, err
}

// newReport starts the report of a reconciliation begun at began.
func newReport(began time.Time, o Options) *Report {
	rep := &Report{GeneratedAt: began.UTC()}
	if !o.Since.IsZero() {
		s := o.Since.UTC()
		rep.Since = &s
	}
	return rep
}

// noteRead records the first read of the archive: its streams, their
// records and speed, and the notes on what the read could not see.
func (rep *Report) noteRead(a *archive, o Options) {
	rep.Streams = a.streams
	if a.aged && o.Since.IsZero() {
		rep.Notes = append(rep.Notes, "the archive has dropped its oldest records (its retention): each store is checked from its lowest archived sequence, and a loss below it is not seen")
	}
	if a.incomplete {
		rep.Notes = append(rep.Notes, fmt.Sprintf("more than %d keys may be archived twice: repeats and conflicts were counted for the first %d only (raise the filter's memory)", o.MaxCandidates, o.MaxCandidates))
	}
	for _, s := range a.streams {
		rep.Records += s.Records
		rep.ReadSeconds += s.Seconds
	}
	if rep.ReadSeconds > 0 {
		rep.RecordsPerSecond = float64(rep.Records) / rep.ReadSeconds
	}
}

// storeReports makes a report for every store to reconcile (those of
// o.Stores, or every store of the fleet view or the archive) and fills in
// the highest sequence of its fleet summary; inFleet says which stores the
// fleet view has.
func storeReports(o Options, entries []fleet.Entry, tallies map[string]*tally) (stores map[string]*StoreReport, inFleet map[string]bool) {
	stores = map[string]*StoreReport{}
	inFleet = map[string]bool{}
	report := func(id string) *StoreReport {
		if o.Stores != nil && !slices.Contains(o.Stores, id) {
			return nil
		}
		if stores[id] == nil {
			stores[id] = &StoreReport{Store: id}
		}
		return stores[id]
	}
	for _, e := range entries {
		inFleet[e.Store] = true
		if sr := report(e.Store); sr != nil {
			readSummary(sr, e)
		}
	}
	for id := range tallies {
		report(id)
	}
	for _, id := range o.Stores {
		report(id)
	}
	return stores, inFleet
}

// readSummary sets the store's highest acknowledged sequence from its
// fleet summary, or notes why it cannot.
func readSummary(sr *StoreReport, e fleet.Entry) {
	var sum command.Summary
	switch err := json.Unmarshal(e.Value, &sum); {
	case e.Reflected:
		sr.Notes = append(sr.Notes, "its fleet record carries the headers central adds to its answers (written to pass for another record): highest acknowledged unknown")
	case err != nil:
		sr.Notes = append(sr.Notes, "its fleet summary does not read: highest acknowledged unknown")
	case sum.StoreID != e.Store:
		sr.Notes = append(sr.Notes, "its fleet summary names another store: highest acknowledged unknown")
	default:
		sr.Highest = sum.HighestSeq
	}
}

// setChecked fills in what the archive holds of a store (t, nil when it
// holds nothing) and the range of its sequences to check, if any.
func setChecked(o Options, a *archive, sr *StoreReport, t *tally, inFleet bool) {
	if t == nil {
		t = &tally{}
		if sr.Highest == 0 && !slices.Contains(o.Stores, sr.Store) {
			return
		}
	}
	sr.Held, sr.Records, sr.Malformed = t.held.Len(), t.records, t.malformed
	if !inFleet {
		sr.Notes = append(sr.Notes, "not in the fleet view: checked up to the highest sequence archived")
	} else if sr.Highest == 0 && t.held.Len() > 0 && len(sr.Notes) == 0 {
		sr.Notes = append(sr.Notes, "its fleet summary has no highest sequence (an older agent): checked up to the highest archived")
	}
	lo, hi := uint64(1), max(sr.Highest, t.held.Max())
	switch {
	case !o.Since.IsZero():
		lo = t.floor
		if lo == 0 {
			if hi > 0 {
				sr.Notes = append(sr.Notes, "no movement it enqueued since --since (plus the grace) is archived: not checked")
			}
			return
		}
	case a.aged:
		// The sequences below the lowest archived may have aged out.
		lo = t.held.Min()
		if lo == 0 {
			if hi > 0 {
				sr.Notes = append(sr.Notes, "nothing of it is left in the archive, which has dropped its oldest records: not checked")
			}
			return
		}
	}
	if hi >= lo && hi > 0 {
		sr.Checked = &Range{lo, hi}
	}
}

// findGaps counts the missing sequences of every checked store, sets
// aside those a change of data file explains, and returns the stores with
// gaps left to ask about (their pending gaps set).
func findGaps(stores map[string]*StoreReport, tallies map[string]*tally) []*StoreReport {
	var asks []*StoreReport
	for id, sr := range stores {
		if sr.Checked == nil {
			continue
		}
		t := tallies[id]
		if t == nil {
			t = &tally{}
		}
		gaps := t.held.Gaps(sr.Checked.From, sr.Checked.To)
		sr.Missing = Count(gaps)
		sr.Files, gaps, sr.LostWithFile = fileFindings(t, gaps)
		if t.tooManyFiles {
			sr.Notes = append(sr.Notes, fmt.Sprintf("more than %d data file identities archived: the changes of file are reported for the first %d", maxFilesPerStore, maxFilesPerStore))
		}
		if Count(gaps) == 0 {
			continue
		}
		asks = append(asks, sr)
		sr.pending = gaps
	}
	return asks
}

// explainAll asks the stores about their pending gaps, o.Concurrency at
// a time; a movement synced after syncedAfter is in transit.
func explainAll(ctx context.Context, o Options, asks []*StoreReport, syncedAfter time.Time) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Concurrency)
	for _, sr := range asks {
		g.Go(func() error {
			explain(gctx, o, sr, syncedAfter)
			return nil
		})
	}
	g.Wait()
}

// collect puts the stores in the report, sorted, and their total.
func (rep *Report) collect(stores map[string]*StoreReport) {
	for _, sr := range stores {
		sr.pending = nil
		rep.Stores = append(rep.Stores, *sr)
	}
	slices.SortFunc(rep.Stores, func(a, b StoreReport) int { return cmp.Compare(a.Store, b.Store) })
	rep.Total = total(rep.Stores)
}

// satAdd is a+b, or the largest uint64 when that overflows: a store's
// fleet summary may claim a highest sequence near 2^64, and a sum that
// wrapped round could hide the others' gaps.
func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// total sums the stores, saturating at the largest uint64.
func total(stores []StoreReport) StoreReport {
	t := StoreReport{Store: "TOTAL"}
	add := func(dst *map[string]uint64, src map[string]uint64) {
		for k, v := range src {
			if *dst == nil {
				*dst = map[string]uint64{}
			}
			(*dst)[k] = satAdd((*dst)[k], v)
		}
	}
	for _, s := range stores {
		t.Highest = satAdd(t.Highest, s.Highest)
		t.Held = satAdd(t.Held, s.Held)
		t.Records = satAdd(t.Records, s.Records)
		t.Missing = satAdd(t.Missing, s.Missing)
		t.LostWithFile = satAdd(t.LostWithFile, s.LostWithFile)
		t.Repeats = satAdd(t.Repeats, s.Repeats)
		t.Conflicts = satAdd(t.Conflicts, s.Conflicts)
		t.SeqReused = satAdd(t.SeqReused, s.SeqReused)
		t.Malformed = satAdd(t.Malformed, s.Malformed)
		add(&t.Explained, s.Explained)
		add(&t.Unexplained, s.Unexplained)
	}
	return t
}

// archive is what the first pass found.
type archive struct {
	tallies map[string]*tally
	streams []StreamRead
	// candidates are the keys the filter saw twice (maybe), by store.
	candidates map[storeKey]struct{}
	incomplete bool // candidates reached MaxCandidates
	// aged says an archive read had dropped its oldest records (its
	// max_age, the retention: deletes and purges are denied).
	aged bool
	// origins holds a fingerprint (origin) of every whole record of
	// RX_ARCHIVE when partitions' archives are read with it; nil
	// otherwise.
	origins     *bloom
	filterBytes uint64
	total       uint64 // the records the archives held when the read began
}

type storeKey struct {
	store string
	key   [16]byte
}

// origin is the fingerprint of a whole record in RX_ARCHIVE: its store,
// key, digest and sequence.
func origin(store string, r record) [16]byte {
	h := sha256.New()
	h.Write([]byte(store))
	h.Write([]byte{0})
	h.Write(r.key[:])
	h.Write(r.digest[:])
	h.Write(binary.BigEndian.AppendUint64(nil, r.seq))
	return [16]byte(h.Sum(nil))
}

// isCopy says whether a record of a partition's archive that names itself
// a copy made by the move to partitions is one: RX_ARCHIVE holds a record
// of the same store with the same key, content and sequence (up to the
// filter's false positives). A store sets its movements' headers, so the
// header alone would let it hide a rewritten movement from the
// reconciliation.
func (a *archive) isCopy(store string, h map[string][]string) bool {
	if a.origins == nil {
		return false
	}
	r, ok := parseRecord(store, h)
	return ok && r.whole && a.origins.has(origin(store, r))
}

// readArchive reads every archive stream into one tally per store.
func readArchive(ctx context.Context, js jetstream.JetStream, o Options) (*archive, error) {
	names, err := streams.Archives(ctx, js, o.Archives)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, errors.New("reconcile: central has no archive stream (RX_ARCHIVE or RX_ARCHIVE_<p>): was it provisioned, and may this identity list streams?")
	}
	var total uint64
	a := &archive{tallies: map[string]*tally{}, candidates: map[storeKey]struct{}{}}
	for _, n := range names {
		if st, err := js.Stream(ctx, n); err == nil {
			total += st.CachedInfo().State.Msgs
			if st.CachedInfo().State.FirstSeq > 1 {
				a.aged = true
			}
		}
	}
	f := readFilter{since: o.Since}
	for _, s := range o.Stores {
		f.subjects = append(f.subjects, central.ArchiveSubject(s))
	}
	floorAt := o.Since.Add(o.Grace)
	filter := newBloom(total, o.MaxFilterBytes)
	a.filterBytes = filter.bytes()
	a.total = total
	progress := progressOf(o, ReadFirst, total)
	if slices.Contains(names, central.ArchiveStreamName) && len(names) > 1 {
		var msgs uint64
		if st, err := js.Stream(ctx, central.ArchiveStreamName); err == nil {
			msgs = st.CachedInfo().State.Msgs
		}
		a.origins = newBloom(msgs, o.MaxFilterBytes)
		a.filterBytes += a.origins.bytes()
	}
	for i, n := range names {
		f.skip = nil
		if skipMigrated(names, n) {
			f.skip = a.isCopy
		}
		fillOrigins := a.origins != nil && n == central.ArchiveStreamName
		sr, err := readStream(ctx, js, n, f, func(store string, h map[string][]string) {
			t := a.tallies[store]
			if t == nil {
				t = &tally{}
				a.tallies[store] = t
			}
			t.records++
			r, ok := parseRecord(store, h)
			if !ok || !r.whole {
				t.malformed++
			}
			if !ok {
				return
			}
			if fillOrigins && r.whole {
				a.origins.addSeen(origin(store, r))
			}
			if !t.held.Add(r.seq) {
				t.dupSeqs.Add(r.seq)
			}
			t.seeFile(r.file, r)
			if r.whole && filter.addSeen(r.key) {
				if len(a.candidates) < o.MaxCandidates {
					a.candidates[storeKey{store, r.key}] = struct{}{}
				} else {
					a.incomplete = true
				}
			}
			if !o.Since.IsZero() && !r.enqueuedAt.Before(floorAt) && (t.floor == 0 || r.seq < t.floor) {
				t.floor = r.seq
			}
		}, progress(i))
		if err != nil {
			return nil, err
		}
		a.streams = append(a.streams, sr)
	}
	return a, nil
}

// maxFilterSubjects is the most stores the second read names in its
// consumer's filter; past it, it reads everything.
const maxFilterSubjects = 256

// findDuplicates reads again the records of the stores that have a
// sequence archived more than once or a key the filter may have seen
// twice, and counts exactly: a key archived more than once with one
// digest is a repeat, with two a conflict; a sequence archived with two
// keys is reused. Nothing is read again when there is no such store.
func findDuplicates(ctx context.Context, js jetstream.JetStream, o Options, a *archive, stores map[string]*StoreReport, rep *Report) error {
	involved, subjects := involvedStores(a, stores)
	if len(subjects) == 0 {
		return nil
	}
	rep.RereadStores = len(subjects)
	d := &duplicates{
		a:        a,
		stores:   stores,
		involved: involved,
		bySeq:    map[string]map[uint64]*firstKey{},
		byKey:    map[storeKey][][32]byte{},
	}
	if err := d.reread(ctx, js, o, subjects, rep); err != nil {
		return err
	}
	d.count(o)
	return nil
}

// involvedStores returns the stores with a sequence archived more than
// once or a candidate key, and the sorted archive subjects of those among
// stores.
func involvedStores(a *archive, stores map[string]*StoreReport) (map[string]bool, []string) {
	involved := map[string]bool{}
	for id, t := range a.tallies {
		if t.dupSeqs.Len() > 0 {
			involved[id] = true
		}
	}
	for sk := range a.candidates {
		involved[sk.store] = true
	}
	var subjects []string
	for id := range involved {
		if stores[id] != nil {
			subjects = append(subjects, central.ArchiveSubject(id))
		}
	}
	slices.Sort(subjects)
	return involved, subjects
}

// firstKey is the first key of a sequence archived more than once, and
// whether another key came with it.
type firstKey struct {
	key    [16]byte
	reused bool
}

// duplicates is what the second read gathers of the involved stores.
type duplicates struct {
	a        *archive
	stores   map[string]*StoreReport
	involved map[string]bool
	// bySeq keeps, per sequence archived more than once, its first key
	// and whether another key came with it: a store choosing its Rx-Seq
	// could archive millions of records under one sequence.
	bySeq map[string]map[uint64]*firstKey
	byKey map[storeKey][][32]byte // the digests of each candidate key
}

// reread reads the archive again for the involved stores' subjects.
func (d *duplicates) reread(ctx context.Context, js jetstream.JetStream, o Options, subjects []string, rep *Report) error {
	names, err := streams.Archives(ctx, js, o.Archives)
	if err != nil {
		return err
	}
	// One read: filtered by store when few are involved, else the whole
	// archive (the server scans it all for a filter anyway, and a read
	// per batch of stores would scan it once per batch).
	filter := readFilter{subjects: subjects, since: o.Since}
	if len(subjects) > maxFilterSubjects {
		filter.subjects = nil
		for _, s := range o.Stores {
			filter.subjects = append(filter.subjects, central.ArchiveSubject(s))
		}
	}
	progress := progressOf(o, ReadAgain, d.a.total)
	for i, n := range names {
		filter.skip = nil
		if skipMigrated(names, n) {
			filter.skip = d.a.isCopy
		}
		sr, err := readStream(ctx, js, n, filter, d.see, progress(i))
		if err != nil {
			return err
		}
		rep.RereadRecords += sr.Records
		rep.RereadSeconds += sr.Seconds
	}
	return nil
}

// see notes the key of a record of an involved store under its sequence
// when that is archived more than once, and its digest under its key when
// that is a candidate.
func (d *duplicates) see(store string, h map[string][]string) {
	t := d.a.tallies[store]
	if t == nil || !d.involved[store] || d.stores[store] == nil {
		return
	}
	r, ok := parseRecord(store, h)
	if !ok || !r.whole {
		return
	}
	if t.dupSeqs.Contains(r.seq) {
		if d.bySeq[store] == nil {
			d.bySeq[store] = map[uint64]*firstKey{}
		}
		if f := d.bySeq[store][r.seq]; f == nil {
			d.bySeq[store][r.seq] = &firstKey{key: r.key}
		} else if f.key != r.key {
			f.reused = true
		}
	}
	sk := storeKey{store, r.key}
	if _, ok := d.a.candidates[sk]; ok {
		d.byKey[sk] = append(d.byKey[sk], r.digest)
	}
}

// count adds the reused sequences, conflicts and repeats found to the
// stores' reports.
func (d *duplicates) count(o Options) {
	for store, seqs := range d.bySeq {
		for _, f := range seqs {
			if f.reused {
				d.stores[store].SeqReused++
			}
		}
	}
	for sk, digests := range d.byKey {
		if len(digests) < 2 {
			continue // the filter's false positive
		}
		sr := d.stores[sk.store]
		if slices.ContainsFunc(digests[1:], func(dg [32]byte) bool { return dg != digests[0] }) {
			sr.Conflicts++
			if len(sr.ConflictKeys) < o.MaxListed {
				sr.ConflictKeys = append(sr.ConflictKeys, hex.EncodeToString(sk.key[:]))
			}
			continue
		}
		sr.Repeats += uint64(len(digests) - 1)
	}
}
