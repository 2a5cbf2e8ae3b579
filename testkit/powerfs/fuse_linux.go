//go:build linux

package powerfs

import (
	"errors"
	"fmt"
	"os"
	"slices"
	stdsync "sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Available reports why an FS cannot be mounted here, or nil when it can.
// It tries once per process: root, /dev/fuse, and a mount of an empty FS.
func Available() error {
	probe.once.Do(func() { probe.err = available() })
	return probe.err
}

var probe struct {
	once stdsync.Once
	err  error
}

func available() error {
	if os.Geteuid() != 0 {
		return errors.New("powerfs: mounting needs root (it mounts directly, without fusermount)")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("powerfs: /dev/fuse is not usable: %w", err)
	}
	f.Close()
	dir, err := os.MkdirTemp("", "powerfs-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	m, err := New(Options{}).Mount(dir)
	if err != nil {
		return fmt.Errorf("powerfs: a test mount failed: %w", err)
	}
	return m.Unmount()
}

// Mount is the FS mounted on a directory.
type Mount struct {
	fs     *FS
	dir    string
	server *fuse.Server
}

// Mount mounts the FS on dir, an existing directory. After a cut it shows
// the durable state the cut kept. The FS must not be mounted elsewhere.
func (f *FS) Mount(dir string) (*Mount, error) {
	f.mu.Lock()
	if f.mounted {
		f.mu.Unlock()
		return nil, errors.New("powerfs: already mounted")
	}
	f.restore()
	gen := f.gen
	f.mounted = true
	f.mu.Unlock()

	raw := &rawFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), fs: f, gen: gen}
	server, err := fuse.NewServer(raw, dir, &fuse.MountOptions{
		DirectMountStrict:  true,
		FsName:             "powerfs",
		Name:               "powerfs",
		DisableXAttrs:      true,
		DisableReadDirPlus: true,
		MaxWrite:           1 << 20,
	})
	if err != nil {
		f.mu.Lock()
		f.mounted = false
		f.mu.Unlock()
		return nil, fmt.Errorf("powerfs: mount %s: %w", dir, err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		server.Unmount()
		f.mu.Lock()
		f.mounted = false
		f.mu.Unlock()
		return nil, fmt.Errorf("powerfs: mount %s: %w", dir, err)
	}
	return &Mount{fs: f, dir: dir, server: server}, nil
}

// Dir is the directory the FS is mounted on.
func (m *Mount) Dir() string { return m.dir }

// Unmount unmounts the FS; every process that used it must have closed
// its files (or exited). It gives up after ten seconds.
func (m *Mount) Unmount() error {
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for {
		if err = m.server.Unmount(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("powerfs: unmount %s: %w", m.dir, err)
		}
		time.Sleep(50 * time.Millisecond) // the kernel gives no event for "no longer busy"
	}
	m.fs.mu.Lock()
	m.fs.mounted = false
	m.fs.mu.Unlock()
	return nil
}

// rawFS serves one mount generation of an FS. Node ids are inode numbers;
// file handles are not used, so a file unlinked while open stays usable.
type rawFS struct {
	fuse.RawFileSystem
	fs  *FS
	gen int
}

const cacheTimeout = time.Second

func (r *rawFS) String() string { return "powerfs" }

func (r *rawFS) lock() func() {
	r.fs.mu.Lock()
	return r.fs.mu.Unlock
}

// node returns the live node id, or nil when the power is off or the node
// unknown.
func (r *rawFS) node(id uint64) *node {
	if !r.fs.live(r.gen) {
		return nil
	}
	return r.fs.inodes[id]
}

func (r *rawFS) attr(n *node, a *fuse.Attr) {
	*a = fuse.Attr{Ino: n.ino, Mode: n.mode, Nlink: 1, Blksize: pageSize}
	if n.isDir() {
		a.Nlink = 2
	}
	a.Size = uint64(len(n.data))
	a.Blocks = (a.Size + 511) / 512
	a.Owner = fuse.Owner{Uid: n.uid, Gid: n.gid}
	t := uint64(n.mtime.Unix())
	ns := uint32(n.mtime.Nanosecond())
	a.Mtime, a.Ctime, a.Atime = t, t, t
	a.Mtimensec, a.Ctimensec, a.Atimensec = ns, ns, ns
}

func (r *rawFS) entry(n *node, out *fuse.EntryOut) {
	out.NodeId = n.ino
	out.SetEntryTimeout(cacheTimeout)
	out.SetAttrTimeout(cacheTimeout)
	r.attr(n, &out.Attr)
}

func (r *rawFS) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer r.lock()()
	dir := r.node(h.NodeId)
	if dir == nil || !dir.isDir() {
		return fuse.EIO
	}
	n, ok := dir.kids[name]
	if !ok {
		return fuse.ENOENT
	}
	r.entry(n, out)
	return fuse.OK
}

func (r *rawFS) Forget(uint64, uint64) {}

func (r *rawFS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer r.lock()()
	n := r.node(in.NodeId)
	if n == nil {
		return fuse.EIO
	}
	out.SetTimeout(cacheTimeout)
	r.attr(n, &out.Attr)
	return fuse.OK
}

func (r *rawFS) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer r.lock()()
	n := r.node(in.NodeId)
	if n == nil {
		return fuse.EIO
	}
	kind := "setattr"
	if in.Valid&fuse.FATTR_SIZE != 0 {
		kind = "truncate"
	}
	if !r.fs.begin(r.gen, Op{Kind: kind, Name: n.name, Off: int64(in.Size)}) {
		return fuse.EIO
	}
	if in.Valid&fuse.FATTR_SIZE != 0 {
		if !n.isReg() {
			return fuse.EINVAL
		}
		r.fs.truncate(n, int64(in.Size))
	}
	// Permission bits and owners take effect at once and are kept by a
	// cut: the tests here are about data and names.
	if in.Valid&fuse.FATTR_MODE != 0 {
		n.mode = n.mode&syscall.S_IFMT | in.Mode&0o7777
	}
	if in.Valid&fuse.FATTR_UID != 0 {
		n.uid = in.Uid
	}
	if in.Valid&fuse.FATTR_GID != 0 {
		n.gid = in.Gid
	}
	out.SetTimeout(cacheTimeout)
	r.attr(n, &out.Attr)
	return fuse.OK
}

// add creates a node named name in the directory id.
func (r *rawFS) add(kind string, h *fuse.InHeader, name string, mode uint32, out *fuse.EntryOut) (*node, fuse.Status) {
	dir := r.node(h.NodeId)
	if dir == nil || !dir.isDir() {
		return nil, fuse.EIO
	}
	if _, ok := dir.kids[name]; ok {
		return nil, fuse.Status(syscall.EEXIST)
	}
	if !r.fs.begin(r.gen, Op{Kind: kind, Name: name}) {
		return nil, fuse.EIO
	}
	n := r.fs.newNode(mode, name)
	n.uid, n.gid = h.Uid, h.Gid
	r.fs.inodes[n.ino] = n
	r.fs.link(dir, name, n)
	r.entry(n, out)
	return n, fuse.OK
}

func (r *rawFS) Mknod(_ <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.lock()()
	_, st := r.add("mknod", &in.InHeader, name, in.Mode&^in.Umask, out)
	return st
}

func (r *rawFS) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.lock()()
	_, st := r.add("mkdir", &in.InHeader, name, syscall.S_IFDIR|(in.Mode&^in.Umask&0o7777), out)
	return st
}

func (r *rawFS) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer r.lock()()
	_, st := r.add("create", &in.InHeader, name, syscall.S_IFREG|(in.Mode&^in.Umask&0o7777), &out.EntryOut)
	return st
}

func (r *rawFS) remove(kind string, h *fuse.InHeader, name string) fuse.Status {
	dir := r.node(h.NodeId)
	if dir == nil || !dir.isDir() {
		return fuse.EIO
	}
	n, ok := dir.kids[name]
	if !ok {
		return fuse.ENOENT
	}
	switch {
	case kind == "rmdir" && !n.isDir():
		return fuse.Status(syscall.ENOTDIR)
	case kind == "rmdir" && len(n.kids) > 0:
		return fuse.Status(syscall.ENOTEMPTY)
	case kind == "unlink" && n.isDir():
		return fuse.Status(syscall.EISDIR)
	}
	if !r.fs.begin(r.gen, Op{Kind: kind, Name: name}) {
		return fuse.EIO
	}
	r.fs.unlink(dir, name)
	return fuse.OK
}

func (r *rawFS) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer r.lock()()
	return r.remove("unlink", h, name)
}

func (r *rawFS) Rmdir(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer r.lock()()
	return r.remove("rmdir", h, name)
}

const renameNoReplace = 1 // RENAME_NOREPLACE

func (r *rawFS) Rename(_ <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	defer r.lock()()
	from, to := r.node(in.NodeId), r.node(in.Newdir)
	if from == nil || to == nil || !from.isDir() || !to.isDir() {
		return fuse.EIO
	}
	if in.Flags&^renameNoReplace != 0 {
		return fuse.EINVAL
	}
	n, ok := from.kids[oldName]
	if !ok {
		return fuse.ENOENT
	}
	if old, ok := to.kids[newName]; ok {
		switch {
		case in.Flags&renameNoReplace != 0:
			return fuse.Status(syscall.EEXIST)
		case old == n:
			return fuse.OK
		case old.isDir() && !n.isDir():
			return fuse.Status(syscall.EISDIR)
		case !old.isDir() && n.isDir():
			return fuse.Status(syscall.ENOTDIR)
		case old.isDir() && len(old.kids) > 0:
			return fuse.Status(syscall.ENOTEMPTY)
		}
	}
	if !r.fs.begin(r.gen, Op{Kind: "rename", Name: oldName + ">" + newName}) {
		return fuse.EIO
	}
	r.fs.rename(from, oldName, to, newName)
	return fuse.OK
}

func (r *rawFS) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.lock()()
	if r.node(in.NodeId) == nil {
		return fuse.EIO
	}
	return fuse.OK
}

func (r *rawFS) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.lock()()
	if n := r.node(in.NodeId); n == nil || !n.isDir() {
		return fuse.EIO
	}
	return fuse.OK
}

func (r *rawFS) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer r.lock()()
	n := r.node(in.NodeId)
	if n == nil {
		return nil, fuse.EIO
	}
	if in.Offset >= uint64(len(n.data)) {
		return fuse.ReadResultData(nil), fuse.OK
	}
	c := copy(buf, n.data[in.Offset:])
	return fuse.ReadResultData(buf[:c]), fuse.OK
}

func (r *rawFS) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer r.lock()()
	n := r.node(in.NodeId)
	if n == nil || !n.isReg() {
		return 0, fuse.EIO
	}
	if !r.fs.begin(r.gen, Op{Kind: "write", Name: n.name, Off: int64(in.Offset), Len: len(data)}) {
		return 0, fuse.EIO
	}
	r.fs.write(n, int64(in.Offset), data)
	return uint32(len(data)), fuse.OK
}

func (r *rawFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if len(data) == 1 {
		return r.Write(cancel, in, data[0])
	}
	return r.Write(cancel, in, slices.Concat(data...))
}

func (r *rawFS) Flush(_ <-chan struct{}, in *fuse.FlushIn) fuse.Status { return fuse.OK }

func (r *rawFS) Release(_ <-chan struct{}, in *fuse.ReleaseIn) {}

func (r *rawFS) ReleaseDir(in *fuse.ReleaseIn) {}

func (r *rawFS) sync(kind string, id uint64) fuse.Status {
	defer r.lock()()
	n := r.node(id)
	if n == nil {
		return fuse.EIO
	}
	if !r.fs.begin(r.gen, Op{Kind: kind, Name: n.name}) {
		return fuse.EIO
	}
	r.fs.fsync(n)
	return fuse.OK
}

func (r *rawFS) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return r.sync("fsync", in.NodeId)
}

func (r *rawFS) FsyncDir(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return r.sync("fsyncdir", in.NodeId)
}

func (r *rawFS) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer r.lock()()
	dir := r.node(in.NodeId)
	if dir == nil || !dir.isDir() {
		return fuse.EIO
	}
	names := make([]string, 0, len(dir.kids))
	for name := range dir.kids {
		names = append(names, name)
	}
	slices.Sort(names)
	for i := int(in.Offset); i < len(names); i++ {
		k := dir.kids[names[i]]
		if !out.AddDirEntry(fuse.DirEntry{Name: names[i], Mode: k.mode, Ino: k.ino, Off: uint64(i + 1)}) {
			break
		}
	}
	return fuse.OK
}

func (r *rawFS) StatFs(_ <-chan struct{}, _ *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	*out = fuse.StatfsOut{Blocks: 1 << 24, Bfree: 1 << 23, Bavail: 1 << 23, Files: 1 << 20, Ffree: 1 << 19, Bsize: pageSize, Frsize: pageSize, NameLen: 255}
	return fuse.OK
}

func (r *rawFS) Access(_ <-chan struct{}, in *fuse.AccessIn) fuse.Status { return fuse.OK }
