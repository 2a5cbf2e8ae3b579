package powerfs

import (
	"cmp"
	"math/rand/v2"
	"slices"
	stdsync "sync"
	"syscall"
	"time"
)

// Options configure an FS.
type Options struct {
	// Seed makes the random choices of Torn cuts repeatable.
	Seed uint64
	// Torn is the probability, in [0, 1], that a page write that was not
	// synced survives a cut; with Torn > 0 each directory also keeps a
	// random prefix of its unsynced entry changes. Zero: a cut keeps
	// exactly what was synced.
	Torn float64
}

// Op is a request that changes the filesystem (or makes a change
// durable), as passed to a CutWhen predicate and recorded by Trace.
type Op struct {
	Seq  int    // 1 for the first such request of the FS, counting across mounts
	Kind string // write, truncate, setattr, create, mknod, mkdir, unlink, rmdir, rename, fsync, fsyncdir
	Name string // the file's or directory's name; for rename "old>new"
	Off  int64  // write: offset
	Len  int    // write: length
}

// FS is an in-memory filesystem with a power switch. It outlives its
// mounts: a cut's durable state is what the next mount shows.
type FS struct {
	mu      stdsync.Mutex
	opts    Options
	rnd     *rand.Rand
	root    *node
	inodes  map[uint64]*node
	nextIno uint64
	gen     int // mount generation; requests of older generations fail
	mounted bool

	seq     int
	trigger func(Op) bool
	tracing bool
	trace   []Op

	off     bool // the power is cut for generation gen
	offC    chan struct{}
	durable *node // the state a cut kept, until the next mount
	cuts    int
	renames int           // cross-directory renames so far, to number them
	kept    map[*node]int // during a cut: the unsynced entry changes each directory keeps
}

// node is a file, a directory or a socket.
type node struct {
	ino      uint64
	mode     uint32 // type and permission bits
	uid, gid uint32
	name     string // the last name it was given, for traces
	mtime    time.Time

	// Regular files.
	data   []byte   // what reads see
	synced []byte   // what an fsync made durable
	log    []change // writes and truncations since the last fsync

	// Directories.
	kids       map[string]*node // what lookups see
	syncedKids map[string]*node // what an fsync of the directory made durable
	dirLog     []entryChange    // changes since the last fsync
}

// change is a write (data at off) or a truncation to size.
type change struct {
	off      int64
	data     []byte
	truncate bool
	size     int64
}

// entryChange sets name to n in a directory (nil n removes it); a rename
// inside one directory also removes from. A rename from one directory to
// another is two changes, one in each, with the same rename number: a cut
// keeps both or neither, as a journalling filesystem commits a rename
// whole.
type entryChange struct {
	name   string
	n      *node
	from   string
	rename int
}

const pageSize = 4096

// New returns an FS holding an empty root directory, with the power on.
func New(opts Options) *FS {
	f := &FS{opts: opts, rnd: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)), offC: make(chan struct{})}
	f.root = f.newNode(syscall.S_IFDIR|0o755, "/")
	f.root.syncedKids = map[string]*node{}
	f.index(f.root)
	return f
}

func (f *FS) newNode(mode uint32, name string) *node {
	f.nextIno++
	n := &node{ino: f.nextIno, mode: mode, name: name, mtime: time.Now()}
	if n.isDir() {
		n.kids = map[string]*node{}
		n.syncedKids = map[string]*node{}
	}
	return n
}

func (n *node) isDir() bool { return n.mode&syscall.S_IFMT == syscall.S_IFDIR }
func (n *node) isReg() bool { return n.mode&syscall.S_IFMT == syscall.S_IFREG }

// index rebuilds the inode table from the tree under n.
func (f *FS) index(root *node) {
	f.inodes = map[uint64]*node{}
	var walk func(n *node)
	walk = func(n *node) {
		if _, ok := f.inodes[n.ino]; ok {
			return
		}
		f.inodes[n.ino] = n
		if n.ino > f.nextIno {
			f.nextIno = n.ino
		}
		for _, k := range n.kids {
			walk(k)
		}
	}
	walk(root)
}

// Cut cuts the power now, if it is on.
func (f *FS) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutLocked()
}

// CutWhen arms a cut before the first request for which pred returns
// true. It replaces an earlier CutWhen or CutAfter; nil disarms it.
func (f *FS) CutWhen(pred func(Op) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trigger = pred
}

// CutAfter arms a cut before the n-th changing request from now (n ≥ 1),
// so the first n-1 are carried out.
func (f *FS) CutAfter(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := f.seq + n
	f.trigger = func(op Op) bool { return op.Seq >= at }
}

// SetTorn changes Options.Torn for the cuts to come.
func (f *FS) SetTorn(p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opts.Torn = p
}

// Off is closed when the power of the current mount is cut.
func (f *FS) Off() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.offC
}

// Seq is the number of changing requests so far.
func (f *FS) Seq() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seq
}

// Cuts is the number of cuts so far.
func (f *FS) Cuts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cuts
}

// Trace starts recording the changing requests (discarding an earlier
// record) when on, and stops when not.
func (f *FS) Trace(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tracing, f.trace = on, nil
}

// Traced returns the requests recorded since Trace(true).
func (f *FS) Traced() []Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.trace)
}

// begin is called, with mu held, before a changing request of mount
// generation gen; it reports false when the request must fail with EIO.
func (f *FS) begin(gen int, op Op) bool {
	if gen != f.gen || f.off {
		return false
	}
	f.seq++
	op.Seq = f.seq
	if f.trigger != nil && f.trigger(op) {
		f.trigger = nil
		f.cutLocked()
		return false
	}
	if f.tracing {
		f.trace = append(f.trace, op)
	}
	return true
}

// live reports whether requests of generation gen may still be served.
func (f *FS) live(gen int) bool { return gen == f.gen && !f.off }

// cutLocked discards what is not durable: it builds the tree the next
// mount will show.
func (f *FS) cutLocked() {
	if f.off {
		return
	}
	f.off = true
	f.cuts++
	f.kept = f.keptChanges()
	f.durable = f.keep(f.root, map[*node]*node{})
	f.kept = nil
	close(f.offC)
}

// keptChanges chooses, for a torn cut, how many of its unsynced entry
// changes each directory keeps: a random prefix, shortened until no
// rename between two directories is kept in one and lost in the other.
func (f *FS) keptChanges() map[*node]int {
	kept := map[*node]int{}
	if f.opts.Torn <= 0 {
		return kept
	}
	var dirs []*node
	for _, n := range f.inodes {
		if n.isDir() && len(n.dirLog) > 0 {
			dirs = append(dirs, n)
		}
	}
	slices.SortFunc(dirs, func(a, b *node) int { return cmp.Compare(a.ino, b.ino) }) // the random choices follow a fixed order
	type half struct {
		dir *node
		at  int
	}
	halves := map[int][]half{} // rename number → its changes
	for _, d := range dirs {
		kept[d] = f.rnd.IntN(len(d.dirLog) + 1)
		for i, c := range d.dirLog {
			if c.rename != 0 {
				halves[c.rename] = append(halves[c.rename], half{d, i})
			}
		}
	}
	// A half is kept when its directory keeps it, or when it is no longer
	// in the directory's log (the directory was synced since).
	for changed := true; changed; {
		changed = false
		for _, hs := range halves {
			if len(hs) != 2 {
				continue // the other half was synced
			}
			a, b := hs[0], hs[1]
			if aKept, bKept := a.at < kept[a.dir], b.at < kept[b.dir]; aKept != bKept {
				if aKept {
					kept[a.dir] = a.at
				} else {
					kept[b.dir] = b.at
				}
				changed = true
			}
		}
	}
	return kept
}

// keep returns the durable copy of n: its synced data, or its synced
// entries (each kept durably in turn), plus with Torn a random part of
// what was not synced.
func (f *FS) keep(n *node, seen map[*node]*node) *node {
	if d, ok := seen[n]; ok {
		return d
	}
	d := &node{ino: n.ino, mode: n.mode, uid: n.uid, gid: n.gid, name: n.name, mtime: n.mtime}
	seen[n] = d
	switch {
	case n.isDir():
		kids := cloneMap(n.syncedKids)
		for _, c := range n.dirLog[:f.kept[n]] {
			c.apply(kids)
		}
		d.kids = map[string]*node{}
		names := make([]string, 0, len(kids))
		for name := range kids {
			names = append(names, name)
		}
		slices.Sort(names) // the random choices follow a fixed order
		for _, name := range names {
			d.kids[name] = f.keep(kids[name], seen)
		}
		d.syncedKids = cloneMap(d.kids)
	case n.isReg():
		data := slices.Clone(n.synced)
		if f.opts.Torn > 0 {
			for _, c := range n.log {
				for _, p := range c.pages() {
					if f.rnd.Float64() < f.opts.Torn {
						data = p.apply(data)
					}
				}
			}
		}
		d.data, d.synced = data, slices.Clone(data)
	}
	return d
}

func cloneMap(m map[string]*node) map[string]*node {
	c := make(map[string]*node, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (c entryChange) apply(kids map[string]*node) {
	if c.from != "" {
		delete(kids, c.from)
	}
	if c.n == nil {
		delete(kids, c.name)
	} else {
		kids[c.name] = c.n
	}
}

// pages splits a write at page boundaries: each page of it may reach the
// disk or not, independently of the others.
func (c change) pages() []change {
	if c.truncate {
		return []change{c}
	}
	var ps []change
	for off, rest := c.off, c.data; len(rest) > 0; {
		n := min(int64(len(rest)), pageSize-off%pageSize)
		ps = append(ps, change{off: off, data: rest[:n]})
		off, rest = off+n, rest[n:]
	}
	return ps
}

// apply carries the change out on data and returns the result.
func (c change) apply(data []byte) []byte {
	if c.truncate {
		return resize(data, c.size)
	}
	end := c.off + int64(len(c.data))
	if end > int64(len(data)) {
		data = resize(data, end)
	}
	copy(data[c.off:], c.data)
	return data
}

func resize(data []byte, size int64) []byte {
	if size <= int64(len(data)) {
		return data[:size:size]
	}
	if size <= int64(cap(data)) {
		old := len(data)
		data = data[:size]
		clear(data[old:])
		return data
	}
	grown := make([]byte, size, max(size, 2*int64(cap(data))))
	copy(grown, data)
	return grown
}

// restore brings up the state the last cut kept, if there was a cut; it
// starts a new mount generation either way.
func (f *FS) restore() {
	if f.off {
		f.root = f.durable
		f.durable = nil
		f.index(f.root)
		f.off = false
		f.offC = make(chan struct{})
	}
	f.gen++
}

// The operations, called with mu held and the request admitted by begin.

func (f *FS) write(n *node, off int64, p []byte) {
	c := change{off: off, data: slices.Clone(p)}
	n.data = c.apply(n.data)
	n.log = append(n.log, c)
	n.mtime = time.Now()
}

func (f *FS) truncate(n *node, size int64) {
	c := change{truncate: true, size: size}
	n.data = c.apply(n.data)
	n.log = append(n.log, c)
	n.mtime = time.Now()
}

func (f *FS) fsync(n *node) {
	if n.isDir() {
		n.syncedKids = cloneMap(n.kids)
		n.dirLog = nil
		return
	}
	for _, c := range n.log {
		n.synced = c.apply(n.synced)
	}
	n.log = nil
}

func (f *FS) link(dir *node, name string, n *node) {
	dir.kids[name] = n
	dir.dirLog = append(dir.dirLog, entryChange{name: name, n: n})
	dir.mtime = time.Now()
}

func (f *FS) unlink(dir *node, name string) {
	delete(dir.kids, name)
	dir.dirLog = append(dir.dirLog, entryChange{name: name})
	dir.mtime = time.Now()
}

func (f *FS) rename(from *node, oldName string, to *node, newName string) {
	n := from.kids[oldName]
	n.name = newName
	if from == to {
		delete(from.kids, oldName)
		from.kids[newName] = n
		from.dirLog = append(from.dirLog, entryChange{name: newName, n: n, from: oldName})
		from.mtime = time.Now()
		return
	}
	f.renames++
	delete(from.kids, oldName)
	from.dirLog = append(from.dirLog, entryChange{name: oldName, rename: f.renames})
	from.mtime = time.Now()
	to.kids[newName] = n
	to.dirLog = append(to.dirLog, entryChange{name: newName, n: n, rename: f.renames})
	to.mtime = time.Now()
}
