//go:build unix

package asap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rxedge/agent/internal/disk"
)

// dir is a folder held by a descriptor: names in it are looked up,
// created and renamed relative to the descriptor, so a link put in place
// of the folder after it was opened is never followed.
type dir struct {
	name string // for messages: the folder's base name
	path string // for the file system's name limit only
	fd   int
}

// openDrop opens the drop folder itself.
func openDrop(path string) (*dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &dir{name: ".", path: path, fd: fd}, nil
}

// sub opens the folder name inside d without following a link: a link
// (or anything but a folder) there is errNotFolder.
func (d *dir) sub(name string) (*dir, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return nil, fmt.Errorf("%s: %w", name, errNotFolder)
	case err != nil:
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return &dir{name: name, path: d.path + string(os.PathSeparator) + name, fd: fd}, nil
}

// holds reports whether d's entry name is still the folder s, not a link
// or another folder put in its place.
func (d *dir) holds(name string, s *dir) bool {
	var at, own unix.Stat_t
	if unix.Fstatat(d.fd, name, &at, unix.AT_SYMLINK_NOFOLLOW) != nil || unix.Fstat(s.fd, &own) != nil {
		return false
	}
	return at.Mode&unix.S_IFMT == unix.S_IFDIR && at.Dev == own.Dev && at.Ino == own.Ino
}

func (d *dir) Close() error { return unix.Close(d.fd) }

// nameMax is the longest name the folder's file system takes.
func (d *dir) nameMax() int { return disk.NameMax(d.path) }

// exists reports whether name is an entry of d (a link is not followed);
// an error when the file system cannot say.
func (d *dir) exists(name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	default:
		return false, err
	}
}

// is reports whether name in d is the file fi describes (a link is not
// followed).
func (d *dir) is(name string, fi os.FileInfo) bool {
	var st unix.Stat_t
	if unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	s, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Mode&unix.S_IFMT == unix.S_IFREG && uint64(st.Dev) == uint64(s.Dev) && st.Ino == s.Ino
}

// rename moves from's entry src to to's entry dst and makes it durable:
// both folders are fsynced.
func rename(from *dir, src string, to *dir, dst string) error {
	if err := unix.Renameat(from.fd, src, to.fd, dst); err != nil {
		return &os.LinkError{Op: "rename", Old: src, New: dst, Err: err}
	}
	if err := unix.Fsync(to.fd); err != nil {
		return err
	}
	if from == to {
		return nil
	}
	return unix.Fsync(from.fd)
}

// writeFile writes b into d as name, durably: into a temporary file
// created new (O_EXCL|O_NOFOLLOW: a link under its name is never written
// through), synced, renamed over name, the folder synced.
func (d *dir) writeFile(name string, b []byte, perm os.FileMode) error {
	tmp := disk.TmpName(d.path, name)
	if err := unix.Unlinkat(d.fd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	fd, err := unix.Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return fmt.Errorf("create %s in %s: %w", tmp, d.name, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return rename(d, tmp, d, name)
}

// remove removes d's entry name, a file.
func (d *dir) remove(name string) error { return unix.Unlinkat(d.fd, name, 0) }
