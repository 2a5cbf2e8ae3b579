package queue

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/rxedge/agent/internal/disk"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// State is where a key is in its life.
type State uint8

// States. Every key is in exactly one.
const (
	Pending State = iota + 1
	Synced
	Quarantined
	Purged
)

// States lists every state, in counter order.
var States = []State{Pending, Synced, Quarantined, Purged}

func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Synced:
		return "synced"
	case Quarantined:
		return "quarantined"
	case Purged:
		return "purged"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Errors returned by the queue.
var (
	// ErrClosed is returned by operations on a closed queue.
	ErrClosed = errors.New("queue: closed")
	// ErrReadOnly is returned by writes to a queue opened read-only.
	ErrReadOnly = errors.New("queue: opened read-only")
	// ErrLocked is returned by Open when another process holds the file.
	ErrLocked = errors.New("queue: data file is locked by another process (is the agent running?)")
	// ErrDiskFull is returned when a commit failed for lack of space. Nothing
	// of that commit was stored; earlier commits are intact.
	ErrDiskFull = errors.New("queue: disk full")
	// ErrStoreMismatch is returned by Open when the file belongs to another store.
	ErrStoreMismatch = errors.New("queue: data file belongs to another store")
	// ErrNotFound is returned for a key the queue does not hold.
	ErrNotFound = errors.New("queue: key not found")
	// ErrOldLayout is returned by a read-only Open of a file in the layout
	// of an older schema (or whose upgrade was cut short): only an open
	// for writing upgrades it.
	ErrOldLayout = errors.New("queue: the data file has an older layout, which is upgraded when the agent starts (or by agent compact)")
)

// ConflictError reports a movement whose movement_id is already held with
// different content, or is used twice with different content in one
// submission. From Enqueue, nothing of its submission was stored; from
// EnqueueEach, nothing of that movement.
type ConflictError struct {
	Index int      // position in the submission
	Key   [16]byte // the key both share
	State State    // the state of the held movement; 0 when the other is in the submission
	Other int      // with State 0: the position of the other movement
}

func (e *ConflictError) Error() string {
	if e.State == 0 {
		return fmt.Sprintf("queue: movements %d and %d of the submission (key %s) share a movement_id but differ in content", e.Other, e.Index, hexKey(e.Key))
	}
	return fmt.Sprintf("queue: movement %d (key %s) conflicts with a %s movement of the same movement_id and different content", e.Index, hexKey(e.Key), e.State)
}

// PurgedError reports a movement whose key an operator purged: it cannot
// be submitted again. Nothing was stored, as for a ConflictError.
type PurgedError struct {
	Index int
	Key   [16]byte
}

func (e *PurgedError) Error() string {
	return fmt.Sprintf("queue: movement %d (key %s) was purged by an operator and cannot be submitted again", e.Index, hexKey(e.Key))
}

func hexKey(k [16]byte) string { return hex.EncodeToString(k[:]) }

// Migration upgrades the file from schema version From to From+1 inside the
// opening transaction. (The upgrade from schema 2 to 3, which rewrites
// every key, is built in and runs in bounded transactions: see
// migrateLayout.)
type Migration struct {
	From uint64
	Up   func(tx *bolt.Tx) error
}

// SchemaVersion is the schema this package writes.
const SchemaVersion = 4

// Options configure Open.
type Options struct {
	// Path of the bbolt file. Required.
	Path string
	// StoreID is recorded in a new file and, when set, checked against an
	// existing one. Required to create a file.
	StoreID string
	// LockTimeout bounds the wait for the file lock. Default 1 s; a
	// non-positive value is replaced by the default, never "wait forever".
	LockTimeout time.Duration
	// ReadOnly opens the file with a shared lock and no writer.
	ReadOnly bool
	// Clock is used for times the queue stamps itself. Default time.Now.
	Clock func() time.Time
	// MaxAhead is how far in the future a due time may legitimately be: the
	// largest retry delay. A due time further ahead can only come from a wall
	// clock that jumped backwards, and is treated as due now. Default 30 s.
	MaxAhead time.Duration
	// MaxGroup caps the submissions committed in one transaction. Default 1024.
	MaxGroup int
	// Migrations upgrade files written with an older schema, one version
	// at a time, inside the opening transaction.
	Migrations []Migration
	// MigrateProgress, when set, is called from time to time while Open
	// converts a file of schema 2 to the current layout, with the keys
	// converted and the keys to convert.
	MigrateProgress func(done, total int64)
	// Lineage holds back the movements this start gives sequences to
	// until Confirm was told central's record of the store (see
	// Lineage). The agent sets it when it sends to central; tools that
	// only read or repair a file do not.
	Lineage bool
	// NoLedger turns the store's log off (see ledger.go): for the
	// benchmark's baseline only. A file written without the log starts a
	// new log at its next open with it.
	NoLedger bool
}

// Queue is an open data file. Its methods are safe for concurrent use.
type Queue struct {
	db       *bolt.DB
	opts     Options
	readOnly bool

	ops       chan *op
	stop      chan struct{}
	done      chan struct{}
	closeMu   stdsync.RWMutex // held for reading while submitting, for writing by Close
	closed    bool
	closeOnce stdsync.Once
	closeErr  error

	commits atomic.Uint64 // write transactions committed
	changed chan struct{} // signalled when new work became pending

	leaseMu stdsync.Mutex
	leased  map[uint64]lease
	spread  spreadWindow // guarded by leaseMu
	lineage Lineage      // guarded by leaseMu
}

// spreadWindow extends MaxAhead while a spread redrive is under way.
type spreadWindow struct {
	until  time.Time
	length time.Duration
}

var (
	bucketMeta       = []byte("meta")
	bucketPending    = []byte("pending")
	bucketDue        = []byte("due")
	bucketKeys       = []byte("key_groups")
	bucketSynced     = []byte("synced_blocks")
	bucketQuarantine = []byte("quarantine")
	bucketJournal    = []byte("journal")

	allBuckets = [][]byte{bucketMeta, bucketPending, bucketDue, bucketKeys, bucketSynced, bucketQuarantine, bucketJournal}

	metaSchema       = []byte("schema_version")
	metaStore        = []byte("store_id")
	metaCreated      = []byte("created_at")
	metaNextSeq      = []byte("next_seq")
	metaSyncedTotal  = []byte("synced_total")
	metaQuarTotal    = []byte("quarantined_total")
	metaSpreadUntil  = []byte("spread_until")
	metaSpreadLength = []byte("spread_length")
	metaLastSynced   = []byte("last_synced_at")
)

// Open opens or creates the data file.
func Open(opts Options) (*Queue, error) {
	if opts.Path == "" {
		return nil, errors.New("queue: open: no path given")
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.MaxAhead <= 0 {
		opts.MaxAhead = 30 * time.Second
	}
	if opts.MaxGroup <= 0 {
		opts.MaxGroup = 1024
	}
	if opts.ReadOnly {
		if _, err := os.Stat(opts.Path); err != nil {
			return nil, fmt.Errorf("queue: open %s: %w", opts.Path, err)
		}
	} else if err := mkdirAll(filepath.Dir(opts.Path), 0o750); err != nil {
		return nil, fmt.Errorf("queue: open: create data directory: %w", err)
	}
	_, statErr := os.Stat(opts.Path)
	created := errors.Is(statErr, os.ErrNotExist) && !opts.ReadOnly
	if created {
		if err := checkMissing(opts.Path); err != nil {
			return nil, err
		}
	}
	db, err := openFile(opts)
	if err == nil && created {
		if oerr := ownLikeDir(opts.Path); oerr != nil {
			db.Close()
			return nil, fmt.Errorf("queue: open %s: give the new file its directory's owner: %w", opts.Path, oerr)
		}
		// The new file's name must be durable before anything written to
		// the file is acknowledged.
		if serr := syncNewFile(opts.Path); serr != nil {
			db.Close()
			return nil, fmt.Errorf("queue: open %s: sync the data directory: %w", opts.Path, serr)
		}
	}
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("queue: open %s: %w", opts.Path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: open %s: %w", opts.Path, classify(err))
	}
	q := &Queue{db: db, opts: opts, readOnly: opts.ReadOnly, leased: make(map[uint64]lease), changed: make(chan struct{}, 1)}
	if opts.ReadOnly {
		err = db.View(func(tx *bolt.Tx) error { return q.checkMeta(tx) })
	} else {
		err = db.Update(func(tx *bolt.Tx) error { return q.init(tx) })
	}
	if err == nil && !opts.ReadOnly {
		err = migrateLayout(db, opts.MigrateProgress, migrateChunk, migrateAfterChunk)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: open %s: %w", opts.Path, err)
	}
	if opts.Lineage {
		// The marker is written once the file and its identity are
		// durable: a marker never names a file that was not made.
		if err := WriteMarker(opts.Path, q.lineage.FileID); err != nil {
			db.Close()
			return nil, fmt.Errorf("queue: open %s: record the data file's identity beside it: %w", opts.Path, err)
		}
	}
	if !opts.ReadOnly {
		q.ops = make(chan *op, 4*opts.MaxGroup)
		q.stop = make(chan struct{})
		q.done = make(chan struct{})
		go q.writer()
	}
	return q, nil
}

// mkdirAll creates dir and its missing parents, like os.MkdirAll, and
// fsyncs the parent of each directory it creates: a data directory whose
// name a power loss takes away takes the data file with it.
func mkdirAll(dir string, perm os.FileMode) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return disk.SyncDir(parent)
}

// syncNewFile makes the name of a file just created durable: it fsyncs the
// directory that holds it and, as far as it may, every directory above,
// which another program (an installer's mkdir -p) may have created just
// before without syncing them.
func syncNewFile(path string) error {
	dir := filepath.Dir(path)
	if err := disk.SyncDir(dir); err != nil {
		return err
	}
	for p := dir; filepath.Dir(p) != p; p = filepath.Dir(p) {
		disk.SyncDir(filepath.Dir(p)) // directories above are not the agent's: no error of theirs stops it
	}
	return nil
}

// openFile opens and locks the bbolt file at opts.Path, making sure the
// file it locked is still the one at that path: a compaction renames a new
// file over the data file while a waiting opener holds the old one, and
// writing there would be writing where nobody reads.
func openFile(opts Options) (*bolt.DB, error) {
	for attempt := 0; ; attempt++ {
		before, statErr := os.Stat(opts.Path)
		db, err := bolt.Open(opts.Path, 0o600, &bolt.Options{
			Timeout:  opts.LockTimeout,
			ReadOnly: opts.ReadOnly,
			// The list of free pages is not written with each commit
			// (see writeFreelist).
			NoFreelistSync: !opts.ReadOnly,
			FreelistType:   bolt.FreelistMapType,
		})
		if err != nil {
			return nil, err
		}
		after, err := os.Stat(opts.Path)
		if err == nil && (statErr != nil || os.SameFile(before, after)) {
			return db, nil
		}
		db.Close()
		if attempt == 2 {
			return nil, errors.New("the data file kept being replaced while opening it (is a compaction running?): try again")
		}
	}
}

func (q *Queue) init(tx *bolt.Tx) error {
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	if meta.Get(metaSchema) == nil {
		if q.opts.StoreID == "" {
			return errors.New("a new data file needs a store id")
		}
		if err := meta.Put(metaSchema, u64(SchemaVersion)); err != nil {
			return err
		}
		if err := newKeySecret(meta); err != nil {
			return err
		}
		if err := meta.Put(metaStore, []byte(q.opts.StoreID)); err != nil {
			return err
		}
		now := q.opts.Clock()
		if err := meta.Put(metaCreated, u64(uint64(now.UnixNano()))); err != nil {
			return err
		}
		// The identity is given in the transaction that makes the file:
		// no file of this schema is ever without one. (Not journalled:
		// the file's first state is its meta; changes are journalled.)
		id, err := newFileID()
		if err != nil {
			return err
		}
		if err := putLineage(meta, id, OriginNew, "", 0, now); err != nil {
			return err
		}
	}
	if s := string(meta.Get(metaStore)); q.opts.StoreID != "" && s != q.opts.StoreID {
		return fmt.Errorf("%w: the file is for store %s, the agent is configured for %s", ErrStoreMismatch, s, q.opts.StoreID)
	}
	v := getU64(meta, metaSchema)
	if v > SchemaVersion {
		return fmt.Errorf("queue: the file has schema version %d, newer than this agent's %d: upgrade the agent", v, SchemaVersion)
	}
	for ; v < SchemaVersion; v++ {
		if v == 2 || v == 3 {
			// Started here, finished by migrateLayout after this
			// transaction, in transactions of its own.
			if err := startLayoutMigration(tx, v); err != nil {
				return fmt.Errorf("queue: upgrade schema %d to %d: %w", v, SchemaVersion, err)
			}
			break
		}
		m, ok := findMigration(q.opts.Migrations, v)
		if !ok {
			m, ok = findMigration([]Migration{migrateIdentity(q.opts.Clock)}, v)
		}
		if !ok {
			return fmt.Errorf("queue: no migration from schema version %d", v)
		}
		if err := m.Up(tx); err != nil {
			return fmt.Errorf("queue: migrate schema %d to %d: %w", v, v+1, err)
		}
		if err := meta.Put(metaSchema, u64(v+1)); err != nil {
			return err
		}
	}
	if q.opts.Lineage {
		if err := setFence(meta); err != nil {
			return err
		}
	}
	if err := q.ledgerOpen(tx); err != nil {
		return err
	}
	q.lineage = readLineage(meta)
	q.spread = spreadWindow{until: time.Unix(0, int64(getU64(meta, metaSpreadUntil))), length: time.Duration(getU64(meta, metaSpreadLength))}
	return nil
}

func (q *Queue) checkMeta(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return errors.New("queue: not an agent data file (no meta bucket)")
	}
	v := getU64(meta, metaSchema)
	if v > SchemaVersion {
		return fmt.Errorf("queue: the file has schema version %d, newer than this agent's %d: upgrade the agent", v, SchemaVersion)
	}
	if q.opts.StoreID != "" {
		if s := string(meta.Get(metaStore)); s != q.opts.StoreID {
			return fmt.Errorf("%w: the file is for store %s, not %s", ErrStoreMismatch, s, q.opts.StoreID)
		}
	}
	if v < SchemaVersion || layoutMigrating(meta) {
		return fmt.Errorf("%w (schema %d): start the agent once, then try again", ErrOldLayout, min(v, SchemaVersion-1))
	}
	q.lineage = readLineage(meta)
	return nil
}

func findMigration(ms []Migration, from uint64) (Migration, bool) {
	for _, m := range ms {
		if m.From == from {
			return m, true
		}
	}
	return Migration{}, false
}

// Path is the data file's path.
func (q *Queue) Path() string { return q.opts.Path }

// StoreID is the store the file belongs to.
func (q *Queue) StoreID() string {
	var s string
	q.db.View(func(tx *bolt.Tx) error {
		s = string(tx.Bucket(bucketMeta).Get(metaStore))
		return nil
	})
	return s
}

// Close finishes the submissions already accepted, stops the writer and
// closes the file. It is safe to call more than once.
func (q *Queue) Close() error {
	q.closeOnce.Do(func() {
		q.closeMu.Lock()
		q.closed = true // no new submissions from here on
		q.closeMu.Unlock()
		if !q.readOnly {
			close(q.stop)
			<-q.done
		}
		q.closeErr = q.db.Close()
	})
	return q.closeErr
}

// op is one unit of work for the writer, run inside the group's write
// transaction in two phases. check (optional) may only read: it gets a
// view, not the transaction, and it is the only place an op can refuse
// itself, by returning an error marked with reject; a rejected op is
// answered with that error, its apply is skipped and the rest of the group
// is unaffected. apply writes. Any other error, from either phase,
// aborts the op: the group's transaction is rolled back and the group is
// run again without the op, so nothing an op wrote before failing is ever
// committed. Both phases may run more than once; they must set every
// result they report afresh on each run.
type op struct {
	check  func(v view) error
	apply  func(tx *bolt.Tx) error
	after  func() // runs after a successful commit, in the writer
	err    error
	failed bool // aborted: err is the op's own, the group committed without it
	result chan struct{}
}

// view is what an op's check phase may do with the group's transaction:
// read.
type view struct{ tx *bolt.Tx }

func (v view) buckets() txBuckets { return buckets(v.tx) }

// rejection marks an error returned by an op's check phase as refusing
// that op alone.
type rejection struct{ err error }

func (r rejection) Error() string { return r.err.Error() }
func (r rejection) Unwrap() error { return r.err }

func reject(err error) error {
	if err == nil {
		return nil
	}
	return rejection{err}
}

// do submits o to the writer and waits for its group to commit.
func (q *Queue) do(o *op) error {
	if q.readOnly {
		return ErrReadOnly
	}
	o.result = make(chan struct{})
	q.closeMu.RLock()
	if q.closed {
		q.closeMu.RUnlock()
		return ErrClosed
	}
	q.ops <- o
	q.closeMu.RUnlock()
	<-o.result
	return o.err
}

// writer owns every write transaction: it takes all submissions waiting,
// up to MaxGroup, commits them in one transaction (one fsync), then answers
// each. Submissions that arrive during a commit form the next group.
func (q *Queue) writer() {
	defer close(q.done)
	group := make([]*op, 0, q.opts.MaxGroup)
	for {
		group = group[:0]
		select {
		case o := <-q.ops:
			group = append(group, o)
		case <-q.stop:
			// No submission can arrive any more: commit what was queued, in
			// groups, then stop.
			for {
				group = group[:0]
			drain:
				for len(group) < q.opts.MaxGroup {
					select {
					case o := <-q.ops:
						group = append(group, o)
					default:
						break drain
					}
				}
				if len(group) == 0 {
					q.writeFreelist()
					return
				}
				q.commit(group)
			}
		}
	fill:
		for len(group) < q.opts.MaxGroup {
			select {
			case o := <-q.ops:
				group = append(group, o)
			default:
				break fill
			}
		}
		q.commit(group)
	}
}

// writeFreelist commits once more, writing the list of the file's free
// pages, so that the next open reads it instead of walking the file.
//
// While the queue runs its commits do not write that list: a drained
// backlog leaves tens of thousands of free pages (half a megabyte of list
// at a million movements), which bbolt would otherwise sort and write with
// every commit. A file whose last commit did not write it (the agent was
// killed, or the power went) has its free pages found again by walking its
// pages when it is next opened, as bbolt does for etcd, which never writes
// the list: about 150 ms for a file of 600 MB in the page cache. Only the
// writer calls it, once it has stopped taking submissions; a failure
// costs the next open that walk, nothing else.
func (q *Queue) writeFreelist() {
	q.db.NoFreelistSync = false
	_ = q.db.Update(func(*bolt.Tx) error { return nil })
}

// commit runs a group in one transaction and answers each op. An op that
// fails is taken out and the rest run again in a new transaction (rolled
// back transactions cost no fsync); an error of the commit itself, such as
// a full disk, is every remaining op's answer.
func (q *Queue) commit(group []*op) {
	live := group
	var err error
	for len(live) > 0 {
		var failed *op
		err = q.db.Update(func(tx *bolt.Tx) error {
			for _, o := range live {
				o.err = nil
				if o.check != nil {
					if err := o.check(view{tx}); err != nil {
						var r rejection
						if errors.As(err, &r) {
							o.err = r.err
							continue
						}
						failed = o
						return err
					}
				}
				if err := o.apply(tx); err != nil {
					failed = o
					return err
				}
			}
			return nil
		})
		if failed == nil {
			break
		}
		failed.failed, failed.err = true, classify(unmarked(err))
		live = slices.DeleteFunc(slices.Clone(live), func(o *op) bool { return o == failed })
	}
	if err == nil && len(live) > 0 {
		q.commits.Add(1)
	}
	for _, o := range group {
		switch {
		case o.failed:
		case err != nil:
			o.err = classify(err)
		case o.err == nil && o.after != nil:
			o.after()
		}
		close(o.result)
	}
}

// unmarked strips a rejection marker from an error that could not be a
// rejection (it came from an op's apply phase).
func unmarked(err error) error {
	var r rejection
	if errors.As(err, &r) {
		return r.err
	}
	return err
}

// Changed is signalled after a commit that made new movements pending
// (an enqueue or a redrive), so the sender need not poll.
func (q *Queue) Changed() <-chan struct{} { return q.changed }

func (q *Queue) notify() {
	select {
	case q.changed <- struct{}{}:
	default:
	}
}

// Commits is the number of write transactions committed since Open; with
// group commit it grows more slowly than the number of submissions.
func (q *Queue) Commits() uint64 { return q.commits.Load() }

// classify maps storage errors to the package's sentinels.
func classify(err error) error {
	if isDiskFull(err) {
		return fmt.Errorf("%w: %v", ErrDiskFull, err)
	}
	return err
}

func getU64(b *bolt.Bucket, k []byte) uint64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func addU64(b *bolt.Bucket, k []byte, delta int64) error {
	return b.Put(k, u64(uint64(int64(getU64(b, k))+delta)))
}
