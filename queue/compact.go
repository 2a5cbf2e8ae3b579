package queue

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/rxedge/agent/internal/disk"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Automatic compaction thresholds: CompactionNeeded reports true when more
// than CompactFreeFraction of the file and more than CompactFreeBytes are
// free. Both must hold, so a small file is never rewritten for a few free
// megabytes and a large busy file is not rewritten for a small fraction.
const (
	CompactFreeFraction = 0.5
	CompactFreeBytes    = 64 << 20
)

// CompactSuffix names the new file a compaction writes next to the data
// file before it replaces it: "<path>.compact". A file of that name left by
// an interrupted compaction holds nothing the data file lacks when it is a
// copy of the same file (same identity) no further along; the next
// compaction removes it then, and refuses otherwise (see CheckLeftovers).
const CompactSuffix = ".compact"

// DefaultCompactTxSize bounds the bytes copied per transaction of the new
// file, so that compacting a large file does not hold it all in memory.
const DefaultCompactTxSize = 32 << 20

// ErrNotJournaled is wrapped by the error Compact returns when the file was
// compacted but the journal entry recording it could not be written.
var ErrNotJournaled = errors.New("queue: compacted, but the journal entry was not written")

// Space is how much of a data file is in use and how much is free.
type Space struct {
	FileSize int64 // the file's size on disk
	InUse    int64 // bytes of pages holding data, the freelist and the meta pages
	Free     int64 // FileSize - InUse: free pages and the file's unused tail
}

// FreeFraction is Free / FileSize (0 for an empty file).
func (s Space) FreeFraction() float64 {
	if s.FileSize <= 0 {
		return 0
	}
	return float64(s.Free) / float64(s.FileSize)
}

// CompactionNeeded reports whether the data file at path is worth
// compacting: more than CompactFreeFraction of it and more than
// CompactFreeBytes free. It reads only the meta and freelist pages, under a
// shared lock, so it is cheap enough for every start-up. A missing file
// needs no compaction. It returns an error wrapping ErrLocked when another
// process holds the file.
//
// While it holds the shared lock no compaction can be under way, so it
// also removes a <path>.compact left by an interrupted one: a start-up
// never leaves such a file behind.
func CompactionNeeded(path string) (bool, Space, error) {
	// A short wait: a held lock means an agent runs, and the caller's own
	// open reports that; the start-up of a second agent must stay quick.
	sp, err := space(path, 100*time.Millisecond)
	if errors.Is(err, os.ErrNotExist) {
		return false, sp, nil
	}
	if err != nil {
		return false, sp, err
	}
	return sp.worthCompacting(), sp, nil
}

func (s Space) worthCompacting() bool {
	return s.Free > CompactFreeBytes && s.FreeFraction() > CompactFreeFraction
}

func space(path string, lockTimeout time.Duration) (Space, error) {
	var sp Space
	fi, err := os.Stat(path)
	if err != nil {
		return sp, fmt.Errorf("queue: compaction check %s: %w", path, err)
	}
	if fi.Size() == 0 {
		return sp, nil // created but never initialised: nothing to read
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		ReadOnly:        true,
		Timeout:         lockTimeout,
		PreLoadFreelist: true,
		FreelistType:    bolt.FreelistMapType,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return sp, fmt.Errorf("queue: compaction check %s: %w", path, ErrLocked)
	}
	if err != nil {
		return sp, fmt.Errorf("queue: compaction check %s: %w", path, err)
	}
	defer db.Close()
	var data fileFacts
	db.View(func(tx *bolt.Tx) error { data = factsOf(tx); return nil })
	if err := removeCompactLeftover(path, data); err != nil {
		return sp, fmt.Errorf("queue: compaction check %s: %w", path, err)
	}
	if fi, err = os.Stat(path); err != nil { // again, now that it is locked
		return sp, fmt.Errorf("queue: compaction check %s: %w", path, err)
	}
	st := db.Stats()
	pageSize := int64(db.Info().PageSize)
	var hwm int64
	db.View(func(tx *bolt.Tx) error {
		hwm = tx.Size()
		return nil
	})
	sp.FileSize = fi.Size()
	sp.InUse = min(max(hwm-int64(st.FreePageN+st.PendingPageN)*pageSize, 0), sp.FileSize)
	sp.Free = sp.FileSize - sp.InUse
	return sp, nil
}

// CompactOptions configure Compact.
type CompactOptions struct {
	// LockTimeout bounds the wait for the data file's exclusive lock.
	// Default 1 s; Compact never waits forever.
	LockTimeout time.Duration
	// TxSize bounds the bytes copied per transaction of the new file.
	// Default DefaultCompactTxSize.
	TxSize int64
	// Actor and Reason are recorded in the journal entry. Actor defaults to
	// ActorAgent.
	Actor  string
	Reason string
	// Progress, when set, is called from time to time during the copy with
	// the number of keys copied and the number to copy.
	Progress func(done, total int64)

	// hook is called at each phase (see the phase constants); tests use it
	// to stop the process at a chosen moment.
	hook func(phase string)
}

// The phases of a compaction, in order, as passed to CompactOptions.hook.
const (
	phaseLocked    = "locked"    // the data file is locked, any leftover removed
	phaseCopying   = "copying"   // after each intermediate commit of the copy
	phaseCopied    = "copied"    // everything copied, the new file not yet synced
	phaseSynced    = "synced"    // the new file fsynced and closed
	phaseVerified  = "verified"  // the new file passed Verify and equals the old
	phaseRenamed   = "renamed"   // the new file is in place; directory not synced
	phaseDirSynced = "dirsynced" // the rename is durable
	phaseReleased  = "released"  // the old file is closed
	phaseJournaled = "journaled" // the journal entry is written
)

// CompactResult is what Compact did.
type CompactResult struct {
	Before   int64 // the file's size before, in bytes
	After    int64 // its size after
	Duration time.Duration
}

// Ratio is After / Before (1 when nothing is known).
func (r CompactResult) Ratio() float64 {
	if r.Before <= 0 {
		return 1
	}
	return float64(r.After) / float64(r.Before)
}

// Compact rewrites the data file at path into a new file holding the same
// buckets, keys, values and bucket sequences without the free pages, then
// puts it in place of the old one. The agent must not be running: Compact
// takes the file's exclusive lock and returns an error wrapping ErrLocked
// when another process holds it.
//
// The steps: lock the data file; remove a leftover <path>.compact; copy
// every bucket into <path>.compact in transactions of at most TxSize bytes;
// fsync it; open it read-only and check it with Verify and against the
// data file, key by key; rename it over the data file; fsync the directory;
// release the old file; journal the compaction (ActionCompact). A crash at
// any step leaves at path either the old file or the new one, both
// complete; the old one until the rename, the new one from then on.
//
// On Unix the rename happens while the old file is still open and locked,
// so no other process can write to the old file in between. A process that
// opened the old file before the rename and waits for its lock would get
// the lock on the replaced file once Compact closes it; Open notices that
// the file it locked is no longer the one at path and opens the new one,
// so nothing is written where nobody will read.
//
// On Windows a file that is open cannot be replaced, so Compact closes the
// old file just before the rename (os.Rename, which is MoveFileEx with
// MOVEFILE_REPLACE_EXISTING). A process that opens the data file in that
// moment makes the rename fail: the data file stays as it was and
// <path>.compact is removed. One that opened, wrote and closed it again
// within that moment would have its writes replaced; this is why the agent
// must be stopped, and not started, while `agent compact` runs.
// Directories cannot be fsynced on Windows: NTFS's metadata journal makes
// the rename durable, and a power loss right after it may bring back the
// old file, which is still complete.
//
// The new file gets the old one's permission bits and, on Unix, its owner
// and group when the process may set them, so an agent running as a
// service user can open a file compacted by an administrator.
func Compact(path string, opts CompactOptions) (res CompactResult, err error) {
	opts = opts.withDefaults()
	start := time.Now()
	// Work on the file itself, not on a symbolic link to it: the rename
	// must replace the file, in its own directory.
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	if err := upgradeFirst(path, opts.LockTimeout); err != nil {
		return res, fmt.Errorf("queue: compact %s: %w", path, err)
	}
	if res.Before, err = compactLocked(path, opts); err != nil {
		return res, fmt.Errorf("queue: compact %s: %w", path, err)
	}
	res.Duration = time.Since(start)
	if fi, err := os.Stat(path); err == nil {
		res.After = fi.Size()
	}
	if err := journalCompaction(path, res, opts); err != nil {
		return res, fmt.Errorf("%w: %s: %v", ErrNotJournaled, path, err)
	}
	opts.hook(phaseJournaled)
	return res, nil
}

// upgradeFirst opens a file of an older schema, or one whose upgrade was
// cut short, as the agent would, which upgrades it: the copy is checked
// by the current schema's rules.
func upgradeFirst(path string, lockTimeout time.Duration) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return ErrLocked
	}
	if err != nil {
		return err
	}
	old := false
	db.View(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			old = getU64(meta, metaSchema) < SchemaVersion || layoutMigrating(meta)
		}
		return nil
	})
	db.Close()
	if !old {
		return nil
	}
	q, err := Open(Options{Path: path, LockTimeout: lockTimeout})
	if err != nil {
		return err
	}
	return q.Close()
}

// withDefaults fills the zero fields of o.
func (o CompactOptions) withDefaults() CompactOptions {
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.TxSize <= 0 {
		o.TxSize = DefaultCompactTxSize
	}
	if o.Actor == "" {
		o.Actor = ActorAgent
	}
	if o.hook == nil {
		o.hook = func(string) {}
	}
	return o
}

// compactLocked does the steps of Compact from locking the data file to
// releasing it, and returns the file's size before (0 when it was not
// locked). On every failure before the rename, <path>.compact is removed.
func compactLocked(path string, opts CompactOptions) (before int64, err error) {
	src, fi, err := lockDataFile(path, opts.LockTimeout)
	if err != nil {
		return 0, err
	}
	srcOpen := true
	defer func() {
		if srcOpen {
			src.Close()
		}
	}()
	before = fi.Size()
	tmp := path + CompactSuffix
	// Under the lock no other compaction runs: a leftover is stale, and
	// removed unless it may hold what the data file lacks.
	var data fileFacts
	src.View(func(tx *bolt.Tx) error { data = factsOf(tx); return nil })
	if err := removeCompactLeftover(path, data); err != nil {
		return before, err
	}
	opts.hook(phaseLocked)

	if err := copyAndCheck(src, tmp, fi, opts); err != nil {
		os.Remove(tmp)
		return before, err
	}
	if runtime.GOOS == "windows" {
		srcOpen = false
		if err := src.Close(); err != nil {
			os.Remove(tmp)
			return before, err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return before, fmt.Errorf("replace the data file: %w", err)
	}
	opts.hook(phaseRenamed)
	syncErr := disk.SyncDir(filepath.Dir(path))
	if syncErr == nil {
		opts.hook(phaseDirSynced)
	}
	if srcOpen {
		srcOpen = false
		src.Close()
	}
	opts.hook(phaseReleased)
	if syncErr != nil {
		return before, fmt.Errorf("the compacted file is in place, but syncing the data directory failed: %w", syncErr)
	}
	return before, nil
}

// lockDataFile opens the agent data file at path with its exclusive lock
// (ErrLocked when another process holds it past timeout) and returns it
// with the file's details, read under the lock.
func lockDataFile(path string, timeout time.Duration) (*bolt.DB, os.FileInfo, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil, err // bolt.Open would create it
	}
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, FreelistType: bolt.FreelistMapType})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, nil, ErrLocked
	}
	if err != nil {
		return nil, nil, classify(err)
	}
	var fi os.FileInfo
	if err = src.View(checkAgentFile); err == nil {
		fi, err = os.Stat(path)
	}
	if err != nil {
		src.Close()
		return nil, nil, err
	}
	return src, fi, nil
}

// copyAndCheck copies src into tmp, fsyncs it, and checks the copy against
// src.
func copyAndCheck(src *bolt.DB, tmp string, fi os.FileInfo, opts CompactOptions) error {
	if err := copyFile(src, tmp, fi, opts, opts.hook); err != nil {
		return classify(err)
	}
	opts.hook(phaseSynced)
	if err := checkCopy(src, tmp, opts.LockTimeout); err != nil {
		return err
	}
	opts.hook(phaseVerified)
	return nil
}

// checkAgentFile refuses to compact a file that is not an agent data file
// or was written by a newer agent.
func checkAgentFile(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return errors.New("not an agent data file (no meta bucket)")
	}
	if v := getU64(meta, metaSchema); v > SchemaVersion {
		return fmt.Errorf("the file has schema version %d, newer than this agent's %d: upgrade the agent", v, SchemaVersion)
	}
	return nil
}

// copyFile copies every bucket of src into a new file at dst and fsyncs
// it. The copy runs without fsync per transaction: until the file is
// synced and renamed it is only a candidate, removed if anything fails.
func copyFile(src *bolt.DB, dst string, srcInfo os.FileInfo, opts CompactOptions, hook func(string)) error {
	db, err := bolt.Open(dst, 0o600, &bolt.Options{
		NoSync:       true,
		NoGrowSync:   true,
		FreelistType: bolt.FreelistMapType,
		PageSize:     src.Info().PageSize,
	})
	if err != nil {
		return err
	}
	c := &copier{dst: db, max: opts.TxSize, progress: opts.Progress, hook: hook}
	err = src.View(c.copyAll)
	if err == nil {
		hook(phaseCopied)
		db.NoSync = false
		err = db.Sync()
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := matchOwner(dst, srcInfo); err != nil {
		return err
	}
	return syncFile(dst)
}

// progressEvery is how many keys are copied between progress calls.
const progressEvery = 16384

// copier copies buckets into dst, committing whenever a transaction holds
// max bytes of keys and values.
type copier struct {
	dst         *bolt.DB
	tx          *bolt.Tx
	size, max   int64
	done, total int64
	progress    func(done, total int64)
	hook        func(string)
}

func (c *copier) copyAll(src *bolt.Tx) (err error) {
	if c.progress != nil {
		src.ForEach(func(_ []byte, b *bolt.Bucket) error {
			c.total += int64(b.Stats().KeyN)
			return nil
		})
		c.progress(0, c.total)
	}
	if c.tx, err = c.dst.Begin(true); err != nil {
		return err
	}
	defer func() {
		if c.tx != nil {
			c.tx.Rollback()
		}
	}()
	err = src.ForEach(func(name []byte, b *bolt.Bucket) error {
		nb, err := c.tx.CreateBucket(name)
		if err != nil {
			return err
		}
		if err := nb.SetSequence(b.Sequence()); err != nil {
			return err
		}
		return c.copyBucket([][]byte{name}, b)
	})
	if err != nil {
		return err
	}
	err = c.tx.Commit()
	c.tx = nil
	if c.progress != nil {
		c.progress(c.done, c.total)
	}
	return err
}

// bucket finds the bucket at path in the current transaction: the
// transaction changes at every intermediate commit.
func (c *copier) bucket(path [][]byte) *bolt.Bucket {
	b := c.tx.Bucket(path[0])
	for _, name := range path[1:] {
		b = b.Bucket(name)
	}
	b.FillPercent = 1.0 // keys arrive in order: fill every page
	return b
}

func (c *copier) copyBucket(path [][]byte, src *bolt.Bucket) error {
	return src.ForEach(func(k, v []byte) error {
		if c.size+int64(len(k)+len(v)) > c.max && c.size > 0 {
			if err := c.tx.Commit(); err != nil {
				c.tx = nil
				return err
			}
			c.hook(phaseCopying)
			tx, err := c.dst.Begin(true)
			if err != nil {
				c.tx = nil
				return err
			}
			c.tx, c.size = tx, 0
			if c.progress != nil {
				c.progress(c.done, c.total)
			}
		}
		c.size += int64(len(k) + len(v))
		c.done++
		if c.progress != nil && c.done%progressEvery == 0 {
			c.progress(c.done, c.total)
		}
		parent := c.bucket(path)
		if v != nil {
			return parent.Put(k, v)
		}
		sb := src.Bucket(k)
		nb, err := parent.CreateBucket(k)
		if err != nil {
			return err
		}
		if err := nb.SetSequence(sb.Sequence()); err != nil {
			return err
		}
		return c.copyBucket(append(path[:len(path):len(path)], k), sb)
	})
}

// checkCopy opens the new file as the agent would, runs the queue's
// invariant check on it and compares it with the old file, key by key.
func checkCopy(src *bolt.DB, tmp string, lockTimeout time.Duration) error {
	q, err := Open(Options{Path: tmp, ReadOnly: true, LockTimeout: lockTimeout})
	if err != nil {
		return fmt.Errorf("check the compacted file: %w", err)
	}
	defer q.Close()
	if err := q.Verify(); err != nil {
		return fmt.Errorf("the compacted file fails the queue's invariant check (the data file is left as it was; check it with the agent stopped): %w", err)
	}
	return src.View(func(stx *bolt.Tx) error {
		return q.db.View(func(dtx *bolt.Tx) error {
			if err := sameBuckets(nil, stx.Cursor(), dtx.Cursor(), stx.Bucket, dtx.Bucket); err != nil {
				return fmt.Errorf("the compacted file differs from the data file: %w", err)
			}
			return nil
		})
	})
}

// sameBuckets walks two buckets in step (a and b are their cursors, ab and
// bb find their sub-buckets) and reports the first difference.
func sameBuckets(path []string, a, b *bolt.Cursor, ab, bb func([]byte) *bolt.Bucket) error {
	ka, va := a.First()
	kb, vb := b.First()
	for ; ka != nil || kb != nil; ka, va, kb, vb = next2(a, b) {
		switch {
		case ka == nil || kb == nil || !bytes.Equal(ka, kb):
			return fmt.Errorf("bucket %q: key %x against %x", path, ka, kb)
		case (va == nil) != (vb == nil):
			return fmt.Errorf("bucket %q: key %x is a bucket in one file only", path, ka)
		case va != nil:
			if !bytes.Equal(va, vb) {
				return fmt.Errorf("bucket %q: key %x has another value", path, ka)
			}
			continue
		}
		sa, sb := ab(ka), bb(kb)
		if sa == nil || sb == nil {
			return fmt.Errorf("bucket %q: key %x is not a bucket", path, ka)
		}
		sub := append(path[:len(path):len(path)], string(ka))
		if sa.Sequence() != sb.Sequence() {
			return fmt.Errorf("bucket %q: sequence %d against %d", sub, sa.Sequence(), sb.Sequence())
		}
		if err := sameBuckets(sub, sa.Cursor(), sb.Cursor(), sa.Bucket, sb.Bucket); err != nil {
			return err
		}
	}
	return nil
}

func next2(a, b *bolt.Cursor) (ka, va, kb, vb []byte) {
	ka, va = a.Next()
	kb, vb = b.Next()
	return
}

// journalCompaction records the compaction in the new file's journal.
func journalCompaction(path string, res CompactResult, opts CompactOptions) error {
	q, err := Open(Options{Path: path, LockTimeout: opts.LockTimeout})
	if err != nil {
		return err
	}
	err = q.Journal(Event{Action: ActionCompact, Actor: opts.Actor, Reason: opts.Reason, Detail: map[string]string{
		"before_bytes": strconv.FormatInt(res.Before, 10),
		"after_bytes":  strconv.FormatInt(res.After, 10),
		"duration":     res.Duration.Round(time.Millisecond).String(),
	}})
	if cerr := q.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncFile fsyncs the file at path.
func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
