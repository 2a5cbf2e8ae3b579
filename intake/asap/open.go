package asap

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/rxedge/agent/internal/disk"
)

// opened is a file of the folder as the watcher opened it: what is read,
// stored and moved is this file, whatever its name refers to meanwhile.
type opened struct {
	name, path string
	f          *os.File
	fi         os.FileInfo // the descriptor's, when opened
	b          []byte      // what was read from it, nil before
}

// open opens a file of the folder without following a link and without
// blocking, and keeps it only when the descriptor is a regular file's;
// anything else is set aside. It returns nil when there is nothing to take.
func (w *Watcher) open(name string) *opened {
	path := filepath.Join(w.Dir, name)
	f, err := disk.OpenNoFollow(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // gone since the folder was read
	case errors.Is(err, syscall.ELOOP):
		w.setAside(name, reasonNotRegular, errors.New("a symbolic link"))
		return nil
	case err != nil:
		w.setAside(name, reasonUnreadable, err)
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		w.setAside(name, reasonUnreadable, err)
		return nil
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		w.setAside(name, reasonNotRegular, fmt.Errorf("a %s", kind(fi.Mode())))
		return nil
	}
	return &opened{name: name, path: path, f: f, fi: fi}
}

// read reads the whole file from its descriptor (its size is at most
// max_file_bytes, checked by the caller), and keeps it only when the file
// did not change while it was read: same size and modification time
// before and after. Otherwise the file is set aside, to be read again at
// the next scan.
func (w *Watcher) read(o *opened) bool {
	size := o.fi.Size()
	// One byte more than the size, to see a file that grew.
	b := make([]byte, size+1)
	n, err := io.ReadFull(o.f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		w.setAside(o.name, reasonUnreadable, err)
		return false
	}
	cur, err := o.f.Stat()
	if err != nil {
		w.setAside(o.name, reasonUnreadable, err)
		return false
	}
	if int64(n) != size || changed(o.fi, cur) {
		w.setAside(o.name, reasonChanged, nil)
		return false
	}
	o.b = b[:n]
	return true
}

// changed reports whether a file's size or modification time differs
// between two looks at it.
func changed(was, now os.FileInfo) bool {
	return was.Size() != now.Size() || !was.ModTime().Equal(now.ModTime())
}

// at reports whether path refers to the opened file, unchanged since it
// was opened.
func (o *opened) at(path string) bool {
	lfi, err := os.Lstat(path)
	if err != nil || !os.SameFile(lfi, o.fi) {
		return false
	}
	cur, err := o.f.Stat()
	return err == nil && !changed(o.fi, cur)
}

// finish moves a taken file to done/ or, with its report, to rejected/,
// durably, and only then counts and logs it: the file shows in its new
// folder as soon as it is renamed, before both folders are synced. When
// the name no longer refers to the file that was read (it was replaced,
// removed or written to since), what was read is written there instead
// and the name is left for the next scan. It reports whether the file was
// taken; a file it could not move is set aside.
func (w *Watcher) finish(o *opened, rep *Report, rejected bool) bool {
	dir, reserve := DoneDir, 0
	if rejected {
		dir, reserve = RejectedDir, len(".report.json")
	}
	if o.b == nil && !o.at(o.path) {
		return false // never read, and replaced since: the next scan judges what is there
	}
	dst, err := free(filepath.Join(w.Dir, dir), o.name, reserve)
	if err == nil && rejected {
		err = w.writeReport(dst, rep)
	}
	moved := false
	if err == nil {
		moved, err = w.move(o, dst)
	}
	if err == nil && !moved && o.b == nil {
		os.Remove(dst + ".report.json")
		return false
	}
	if err == nil && !moved {
		err = disk.WriteFile(dst, o.b, o.fi.Mode().Perm())
		w.log().Info("ASAP_FILE_REPLACED", "file", o.name, "kept_as", filepath.Join(dir, filepath.Base(dst)),
			"detail", "the name no longer refers to the file that was read (replaced, removed or written to since): what was read is kept; the name is left for the next look")
	}
	if err != nil {
		w.setAside(o.name, reasonCannotMove, err)
		return false
	}
	delete(w.notes, o.name)
	w.Counter.File(rejected)
	attrs := []any{"file", o.name, "records", rep.Records, "stored", rep.Stored, "duplicates", rep.Duplicates}
	if base := filepath.Base(dst); base != o.name {
		attrs = append(attrs, "kept_as", base)
	}
	if !rejected {
		w.log().Info("ASAP_FILE_DONE", attrs...)
		return true
	}
	w.log().Warn("ASAP_FILE_REJECTED", append(attrs, "rejected_records", rep.rejected(), "file_errors", len(rep.Errors),
		"report", filepath.Base(dst)+".report.json")...)
	return true
}

// writeReport writes rep beside dst, durably.
func (w *Watcher) writeReport(dst string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := disk.WriteFile(dst+".report.json", append(b, '\n'), 0o660); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	return nil
}

// testHookBeforeRename, when set, runs between move's last look at a
// name and its rename: tests replace the file there.
var testHookBeforeRename func(path string)

// move renames the opened file to dst only if its name still refers to
// it, unchanged; moved is false when it does not. The name can change
// hands between that look and the rename, so what arrived is looked at
// too: a file that is not the one read is put back in the folder, to be
// taken at the next scan.
func (w *Watcher) move(o *opened, dst string) (moved bool, err error) {
	if !o.at(o.path) {
		return false, nil
	}
	if testHookBeforeRename != nil {
		testHookBeforeRename(o.path)
	}
	if err := disk.Rename(o.path, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // removed in between
		}
		return false, fmt.Errorf("move to %s: %w", filepath.Base(filepath.Dir(dst)), err)
	}
	if o.at(dst) {
		return true, nil
	}
	back, err := free(w.Dir, o.name, 0)
	if err == nil {
		err = disk.Rename(dst, back)
	}
	if err != nil {
		return false, fmt.Errorf("put back a file that replaced the one read, from %s: %w", filepath.Base(filepath.Dir(dst)), err)
	}
	return false, nil
}
