package fleet

import (
	"cmp"
	"log/slog"
	"slices"
	"sort"
	"strings"
	stdsync "sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/status"
)

// Conditions a store's summary reports beside its judged state: what the
// fleet page shows as the store's state and filters by, with the states.
const (
	CondSyncing      = "syncing"       // online, with movements pending
	CondOffline      = "offline"       // not connected to central
	CondPaused       = "paused"        // connected, but central cannot take anything
	CondQuarantining = "quarantining"  // movements wait in its quarantine
	CondLineageHeld  = "lineage_held"  // another data file gives its sequences: nothing is sent
	CondFileRestored = "file_restored" // its data file was restored from an older copy
	CondFileReplaced = "file_replaced" // its data file is a new one that continues an old one
)

// RosterStore is one store of the roster with its region and tags
// (provision.Place).
type RosterStore struct {
	Store  string
	Region string
	Tags   []string
}

// IndexOptions configure an Index.
type IndexOptions struct {
	// Roster lists the stores expected, with their places; nil: no
	// roster (every store seen is admitted, none is missing).
	Roster []RosterStore
	// Limits judge each store (see Judge).
	Limits Limits
	// Clock is now. Default time.Now.
	Clock func() time.Time
	// Rejudge is how often the states that follow from time alone
	// (stale, silent) are judged again; default DefaultRejudge.
	Rejudge time.Duration
	// WitnessKey is the witness's note verifier key: with it the index
	// follows the witness stream and says whether each store's newest
	// checkpoint is countersigned; "" leaves that unknown.
	WitnessKey string
	// WitnessJS reads the witness stream: an identity allowed to (in the
	// production configuration the auditor's, through
	// central.AuditAPIPrefix; the operator's is not). Nil: Run's.
	WitnessJS jetstream.JetStream
	// Logger reports what the watch cannot read. Default: discarded.
	Logger *slog.Logger
}

// DefaultRejudge is how often an Index judges again by time alone.
const DefaultRejudge = 5 * time.Second

// Record is one store's line of the index: its judged state, the
// conditions its summary reports, its place on the roster and, when the
// index follows the witness, its newest countersigned checkpoint.
// Records are copies: changing one changes nothing in the index.
type Record struct {
	Store      string
	State      string
	Conditions []string
	Problems   []string
	// LastSeen is the server's time of its latest summary; zero when
	// never seen.
	LastSeen time.Time
	Summary  *command.Summary
	Region   string
	Tags     []string
	// Witnessed is the newest checkpoint of the store the witness
	// countersigned, nil when none was seen.
	Witnessed *Witnessed
}

// Witnessed is a countersigned checkpoint: its log and size.
type Witnessed struct {
	Log  string
	Size int64
}

// Countersigned says whether the store's newest acknowledged checkpoint
// (from its summary) is countersigned: known is false when the index
// does not follow the witness or the summary names no checkpoint.
func (r Record) Countersigned(following bool) (known, yes bool) {
	if !following || r.Summary == nil || r.Summary.CheckpointSize == 0 {
		return false, false
	}
	w := r.Witnessed
	return true, w != nil && w.Log == r.Summary.CheckpointLog && w.Size >= r.Summary.CheckpointSize
}

// Index is the fleet view kept in memory: every store's latest summary
// and judged state, indexed by state and condition, region, tag, version
// and store id, so that a page of the fleet costs the stores it matches,
// never a read of central. Run keeps it up to date from the fleet
// bucket; Query reads it.
//
// Ownership: the records and their indexes are behind one RWMutex; Run's
// goroutines write, any number of readers query.
type Index struct {
	o IndexOptions

	mu     stdsync.RWMutex
	recs   map[string]*Record
	ids    []string                       // every store id, sorted: the prefix search
	facets map[string]map[string]struct{} // facet → store ids; see facetKeys
	roster map[string]RosterStore
	// witnessed is each store's newest countersigned checkpoint, kept
	// apart from the records: it may arrive before the store's summary.
	witnessed map[string]Witnessed
	stats     IndexStats

	ready     chan struct{}
	readyOnce stdsync.Once
}

// IndexStats count what the index took from central.
type IndexStats struct {
	// Applied counts the fleet view's messages applied.
	Applied uint64
	// Unreadable counts the fleet view's messages whose value does not
	// read or names another store, and the witness stream's records
	// that do not verify: each is reported, none stops the index.
	Unreadable uint64
	// JudgedAt is when the index last judged every store by time.
	JudgedAt time.Time
}

// NewIndex returns an index holding the roster's stores, each missing
// until seen.
func NewIndex(o IndexOptions) *Index {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Rejudge <= 0 {
		o.Rejudge = DefaultRejudge
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ix := &Index{o: o, recs: map[string]*Record{}, facets: map[string]map[string]struct{}{}, witnessed: map[string]Witnessed{}, ready: make(chan struct{})}
	if o.Roster != nil {
		ix.roster = make(map[string]RosterStore, len(o.Roster))
		for _, r := range o.Roster {
			ix.roster[r.Store] = r
		}
		for _, r := range o.Roster {
			ix.put(recordOf(missingStore(r.Store), r))
		}
	}
	ix.stats.JudgedAt = o.Clock()
	return ix
}

// Ready is closed once the index holds every summary the fleet view held
// when Run started.
func (ix *Index) Ready() <-chan struct{} { return ix.ready }

// Following reports whether the index follows the witness stream.
func (ix *Index) Following() bool { return ix.o.WitnessKey != "" }

// Stats are the index's counts.
func (ix *Index) Stats() IndexStats {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.stats
}

// Len is the number of stores the index holds.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.recs)
}

// Apply takes one entry of the fleet view, as Run does for each message:
// the store's line is judged again and its indexes moved.
func (ix *Index) Apply(e Entry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.stats.Applied++
	r, onRoster := ix.place(e.Store)
	fs := judgeEntry(e, onRoster, ix.o.Clock(), ix.o.Limits)
	if fs.State == Unverifiable {
		ix.stats.Unreadable++
	}
	rec := recordOf(fs, r)
	if w, ok := ix.witnessed[e.Store]; ok {
		rec.Witnessed = &w
	}
	ix.put(rec)
}

// Witness takes a verified countersigned checkpoint of store: the newest
// of a log is kept, for the store's record now or when its summary
// comes (a store the fleet view never names is on no page).
func (ix *Index) Witness(store string, w Witnessed) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if p, ok := ix.witnessed[store]; ok && p.Log == w.Log && p.Size >= w.Size {
		return
	}
	ix.witnessed[store] = w
	if old := ix.recs[store]; old != nil {
		rec := *old
		rec.Witnessed = &w
		ix.put(&rec)
	}
}

// place is the roster's line of store and whether the roster admits it.
func (ix *Index) place(store string) (RosterStore, bool) {
	if ix.roster == nil {
		return RosterStore{Store: store}, true
	}
	r, ok := ix.roster[store]
	if !ok {
		r.Store = store
	}
	return r, ok
}

// Rejudge judges every seen store again at now: a store that stopped
// writing becomes stale, then silent, without a message.
func (ix *Index) Rejudge() {
	now := ix.o.Clock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, old := range ix.recs {
		if old.LastSeen.IsZero() || old.State == Unverifiable {
			continue
		}
		fs := Store{Store: old.Store, State: OK, LastSeen: &old.LastSeen, Summary: old.Summary}
		var s command.Summary
		if old.Summary != nil {
			s = *old.Summary
		}
		_, onRoster := ix.place(old.Store)
		judgeSeen(&fs, s, onRoster, now, ix.o.Limits)
		if fs.State != old.State || !slices.Equal(fs.Problems, old.Problems) {
			rec := *old
			rec.State, rec.Problems = fs.State, fs.Problems
			ix.put(&rec)
		}
	}
	ix.stats.JudgedAt = now
}

// recordOf is a judged line as a record, with its conditions and place.
func recordOf(fs Store, r RosterStore) *Record {
	rec := &Record{Store: fs.Store, State: fs.State, Problems: fs.Problems, Summary: fs.Summary, Region: r.Region, Tags: r.Tags}
	if fs.LastSeen != nil {
		rec.LastSeen = *fs.LastSeen
	}
	rec.Conditions = conditions(fs.Summary)
	return rec
}

// conditions are what a summary reports, in the order of the constants.
func conditions(s *command.Summary) []string {
	if s == nil {
		return nil
	}
	var out []string
	add := func(ok bool, c string) {
		if ok {
			out = append(out, c)
		}
	}
	add(s.State == status.Online && s.Pending > 0, CondSyncing)
	add(s.State == status.Offline, CondOffline)
	add(s.State == status.Paused, CondPaused)
	add(s.Quarantined > 0, CondQuarantining)
	add(s.Lineage == status.LineageHeld, CondLineageHeld)
	add(s.FileOrigin == "restored", CondFileRestored)
	add(s.FileOrigin == "replaced", CondFileReplaced)
	return out
}

// facetKeys are the facets a record is found under: its state and
// conditions (state:), region, tags and version.
func facetKeys(r *Record) []string {
	keys := []string{"state:" + r.State}
	for _, c := range r.Conditions {
		keys = append(keys, "state:"+c)
	}
	if r.Region != "" {
		keys = append(keys, "region:"+r.Region)
	}
	for _, t := range r.Tags {
		keys = append(keys, "tag:"+t)
	}
	if r.Summary != nil && r.Summary.Version != "" {
		keys = append(keys, "version:"+r.Summary.Version)
	}
	return keys
}

// put replaces a store's record and moves it between facets. The caller
// holds the write lock.
func (ix *Index) put(rec *Record) {
	old := ix.recs[rec.Store]
	if old != nil {
		for _, k := range facetKeys(old) {
			if set := ix.facets[k]; set != nil {
				delete(set, old.Store)
				if len(set) == 0 {
					delete(ix.facets, k)
				}
			}
		}
	} else {
		i, _ := slices.BinarySearch(ix.ids, rec.Store)
		ix.ids = slices.Insert(ix.ids, i, rec.Store)
	}
	ix.recs[rec.Store] = rec
	for _, k := range facetKeys(rec) {
		set := ix.facets[k]
		if set == nil {
			set = map[string]struct{}{}
			ix.facets[k] = set
		}
		set[rec.Store] = struct{}{}
	}
}

// Sort orders of Query.
const (
	SortProblems      = "problems" // worst state first, then store id: the default
	SortStore         = "store"
	SortLastSeen      = "last_seen"
	SortPending       = "pending"
	SortOldestPending = "oldest_pending"
	SortQuarantined   = "quarantined"
	SortFreeDisk      = "free_disk"
	SortVersion       = "version"
)

// Page sizes of Query.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// Query selects, orders and pages the index.
type Query struct {
	// State is a fleet state or a condition; "" for all.
	State   string
	Region  string
	Tag     string
	Version string
	// Prefix keeps the stores whose id starts with it.
	Prefix string
	// Sort is one of the Sort constants ("" is SortProblems); Desc
	// reverses it.
	Sort   string
	Desc   bool
	Offset int
	// Limit is the page size: 0 is DefaultPageSize, at most MaxPageSize.
	Limit int
}

// Page is one page of a Query.
type Page struct {
	Records []Record
	// Matched counts every store the query matched.
	Matched int
	// Counts are the stores of the whole fleet in each state and
	// condition; Total is every store.
	Counts map[string]int
	Total  int
	// Regions, Tags and Versions are every value the fleet has, sorted,
	// for the filters.
	Regions, Tags, Versions []string
	JudgedAt                time.Time
}

// Query returns a page of the stores q selects. It reads the index
// only: its cost is the stores matched (sorted) and the page (copied).
func (ix *Index) Query(q Query) Page {
	if q.Limit <= 0 {
		q.Limit = DefaultPageSize
	}
	q.Limit = min(q.Limit, MaxPageSize)
	q.Offset = max(q.Offset, 0)
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	matched := ix.match(q)
	slices.SortFunc(matched, order(q.Sort, q.Desc))
	p := Page{Matched: len(matched), Total: len(ix.recs), JudgedAt: ix.stats.JudgedAt, Counts: map[string]int{}}
	for _, r := range matched[min(q.Offset, len(matched)):min(q.Offset+q.Limit, len(matched))] {
		p.Records = append(p.Records, copyRecord(r))
	}
	for k, set := range ix.facets {
		kind, v, _ := strings.Cut(k, ":")
		switch kind {
		case "state":
			p.Counts[v] = len(set)
		case "region":
			p.Regions = append(p.Regions, v)
		case "tag":
			p.Tags = append(p.Tags, v)
		case "version":
			p.Versions = append(p.Versions, v)
		}
	}
	slices.Sort(p.Regions)
	slices.Sort(p.Tags)
	slices.Sort(p.Versions)
	return p
}

// Get returns one store's record.
func (ix *Index) Get(store string) (Record, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	r := ix.recs[store]
	if r == nil {
		return Record{}, false
	}
	return copyRecord(r), true
}

// Stores are the ids of every store q selects (its paging ignored), in
// store order: what a bulk action runs over.
func (ix *Index) Stores(q Query) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	matched := ix.match(q)
	out := make([]string, len(matched))
	for i, r := range matched {
		out[i] = r.Store
	}
	slices.Sort(out)
	return out
}

func copyRecord(r *Record) Record {
	c := *r
	c.Conditions, c.Problems, c.Tags = slices.Clone(r.Conditions), slices.Clone(r.Problems), slices.Clone(r.Tags)
	if r.Summary != nil {
		s := *r.Summary
		c.Summary = &s
	}
	if r.Witnessed != nil {
		w := *r.Witnessed
		c.Witnessed = &w
	}
	return c
}

// match is every record q's filters select, walking the smallest of the
// facets (or the prefix's run of ids) it names and checking the rest.
// The caller holds the read lock.
func (ix *Index) match(q Query) []*Record {
	var sets []map[string]struct{}
	for _, k := range []struct{ kind, v string }{{"state", q.State}, {"region", q.Region}, {"tag", q.Tag}, {"version", q.Version}} {
		if k.v == "" {
			continue
		}
		set := ix.facets[k.kind+":"+k.v]
		if len(set) == 0 {
			return nil
		}
		sets = append(sets, set)
	}
	ids := ix.ids
	if q.Prefix != "" {
		lo := sort.SearchStrings(ix.ids, q.Prefix)
		hi := lo + sort.Search(len(ix.ids)-lo, func(i int) bool { return !strings.HasPrefix(ix.ids[lo+i], q.Prefix) })
		ids = ix.ids[lo:hi]
	}
	in := func(id string) bool {
		for _, set := range sets {
			if _, ok := set[id]; !ok {
				return false
			}
		}
		return true
	}
	var out []*Record
	smallest := slices.MinFunc(append(sets, nil), func(a, b map[string]struct{}) int {
		return cmp.Compare(sizeOr(a, len(ids)), sizeOr(b, len(ids)))
	})
	if smallest == nil || len(ids) <= len(smallest) {
		for _, id := range ids {
			if in(id) {
				out = append(out, ix.recs[id])
			}
		}
		return out
	}
	for id := range smallest {
		if in(id) && strings.HasPrefix(id, q.Prefix) {
			out = append(out, ix.recs[id])
		}
	}
	return out
}

// sizeOr is the size of a set, or n for no set (the run of ids).
func sizeOr(set map[string]struct{}, n int) int {
	if set == nil {
		return n
	}
	return len(set)
}

// severity ranks the states, the worst first.
var severity = map[string]int{Unverifiable: 0, Missing: 1, Silent: 2, Stale: 3, Attention: 4, Unknown: 5, OK: 6}

// order is the comparison of a sort order; ties go by store id.
func order(by string, desc bool) func(a, b *Record) int {
	var key func(a, b *Record) int
	num := func(f func(*command.Summary) float64) func(a, b *Record) int {
		return func(a, b *Record) int {
			// A store with no summary sorts below every value.
			va, vb := -1.0, -1.0
			if a.Summary != nil {
				va = f(a.Summary)
			}
			if b.Summary != nil {
				vb = f(b.Summary)
			}
			return cmp.Compare(va, vb)
		}
	}
	switch by {
	case SortStore:
		key = func(a, b *Record) int { return 0 }
	case SortLastSeen:
		key = func(a, b *Record) int { return a.LastSeen.Compare(b.LastSeen) }
	case SortPending:
		key = num(func(s *command.Summary) float64 { return float64(s.Pending) })
	case SortOldestPending:
		key = num(func(s *command.Summary) float64 { return deref(s.OldestPendingAge) })
	case SortQuarantined:
		key = num(func(s *command.Summary) float64 { return float64(s.Quarantined) })
	case SortFreeDisk:
		key = num(func(s *command.Summary) float64 {
			if s.FreeDiskBytes == nil {
				return -1
			}
			return float64(*s.FreeDiskBytes)
		})
	case SortVersion:
		key = func(a, b *Record) int { return cmp.Compare(version(a), version(b)) }
	default:
		key = func(a, b *Record) int { return cmp.Compare(severity[a.State], severity[b.State]) }
	}
	return func(a, b *Record) int {
		c := key(a, b)
		if desc {
			c = -c
		}
		if c == 0 {
			c = cmp.Compare(a.Store, b.Store)
		}
		return c
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func version(r *Record) string {
	if r.Summary == nil {
		return ""
	}
	return r.Summary.Version
}
