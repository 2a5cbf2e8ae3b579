//go:build !unix

package asap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rxedge/agent/internal/disk"
)

// dir is a folder held open as an os.Root: names in it are looked up,
// created and renamed inside it, and a link that leads out of the drop
// folder is refused.
type dir struct {
	name   string // for messages: the folder's base name
	path   string // for the file system's name limit only
	root   *os.Root
	parent *dir // the drop folder, for done/ and rejected/
}

// openDrop opens the drop folder itself.
func openDrop(path string) (*dir, error) {
	r, err := os.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	return &dir{name: ".", path: path, root: r}, nil
}

// sub opens the folder name inside d; a link (or anything but a folder)
// there is errNotFolder.
func (d *dir) sub(name string) (*dir, error) {
	fi, err := d.root.Lstat(name)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	if !fi.IsDir() || fi.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s: %w", name, errNotFolder)
	}
	r, err := d.root.OpenRoot(name)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return &dir{name: name, path: filepath.Join(d.path, name), root: r, parent: d}, nil
}

// holds reports whether d's entry name is still the folder s.
func (d *dir) holds(name string, s *dir) bool {
	at, err := d.root.Lstat(name)
	if err != nil || !at.IsDir() {
		return false
	}
	own, err := s.root.Stat(".")
	return err == nil && os.SameFile(at, own)
}

func (d *dir) Close() error { return d.root.Close() }

// nameMax is the longest name the folder's file system takes.
func (d *dir) nameMax() int { return disk.NameMax(d.path) }

// exists reports whether name is an entry of d.
func (d *dir) exists(name string) (bool, error) {
	_, err := d.root.Lstat(name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// is reports whether name in d is the file fi describes.
func (d *dir) is(name string, fi os.FileInfo) bool {
	at, err := d.root.Lstat(name)
	return err == nil && at.Mode().IsRegular() && os.SameFile(at, fi)
}

// rename moves from's entry src to to's entry dst, between the drop
// folder and one of its folders or inside one folder.
func rename(from *dir, src string, to *dir, dst string) error {
	switch {
	case from == to:
		return from.root.Rename(src, dst)
	case to.parent == from:
		return from.root.Rename(src, filepath.Join(to.name, dst))
	case from.parent == to:
		return to.root.Rename(filepath.Join(from.name, src), dst)
	}
	return errors.New("rename between unrelated folders")
}

// writeFile writes b into d as name: into a temporary file created new
// (O_EXCL), synced, renamed over name.
func (d *dir) writeFile(name string, b []byte, perm os.FileMode) error {
	tmp := disk.TmpName(d.path, name)
	if err := d.root.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := d.root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return fmt.Errorf("create %s in %s: %w", tmp, d.name, err)
	}
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
func (d *dir) remove(name string) error { return d.root.Remove(name) }
