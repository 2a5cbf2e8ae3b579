package asap

import (
	"bytes"
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

// unchanged reports whether the opened file holds what was read from it:
// the same size and modification time on the descriptor and, once read,
// the same bytes, read again from the descriptor (a file rewritten in
// place with its modification time put back has the same size and time).
func (o *opened) unchanged() bool {
	cur, err := o.f.Stat()
	if err != nil || changed(o.fi, cur) {
		return false
	}
	if o.b == nil {
		return true
	}
	r := io.NewSectionReader(o.f, 0, int64(len(o.b))+1)
	buf := make([]byte, compareChunk)
	rest := o.b
	for {
		n, err := r.Read(buf)
		if n > len(rest) || !bytes.Equal(buf[:n], rest[:n]) {
			return false
		}
		rest = rest[n:]
		if errors.Is(err, io.EOF) {
			return len(rest) == 0
		}
		if err != nil {
			return false
		}
	}
}

// compareChunk is how much of a file unchanged reads at a time.
const compareChunk = 64 << 10

// at reports whether name in the drop folder refers to the opened file,
// unchanged since it was opened (size and modification time).
func (o *opened) at(drop *dir) bool {
	if !drop.is(o.name, o.fi) {
		return false
	}
	cur, err := o.f.Stat()
	return err == nil && !changed(o.fi, cur)
}

// errNotFolder is done/ or rejected/ not being a folder: a link, or
// anything else, put in its place.
var errNotFolder = errors.New("not a folder (a link or another file is in its place): it must be a folder, not a link")

// folders opens the drop folder and its folder sub (done/ or rejected/),
// without following a link, for one file's move: every name is then
// looked up, written and renamed relative to them.
func (w *Watcher) folders(sub string) (drop, to *dir, err error) {
	drop, err = openDrop(w.Dir)
	if err != nil {
		return nil, nil, err
	}
	to, err = drop.sub(sub)
	if err != nil {
		drop.Close()
		return nil, nil, err
	}
	return drop, to, nil
}

// finish moves a taken file to done/ or, with its report, to rejected/,
// durably, and only then counts and logs it: the file shows in its new
// folder as soon as it is renamed, before both folders are synced. When
// the name no longer refers to the file that was read (it was replaced,
// removed or written to since), what was read is written there instead
// and the name is left for the next scan. It reports whether the file was
// taken; a file it could not move (done/ or rejected/ is not a folder, or
// was swapped during the move) is set aside, left in the drop folder.
func (w *Watcher) finish(o *opened, rep *Report, rejected bool) bool {
	sub, reserve := DoneDir, 0
	if rejected {
		sub, reserve = RejectedDir, len(".report.json")
	}
	drop, to, err := w.folders(sub)
	if err != nil {
		w.setAside(o.name, reasonCannotMove, err)
		return false
	}
	defer drop.Close()
	defer to.Close()
	if o.b == nil && !o.at(drop) {
		return false // never read, and replaced since: the next scan judges what is there
	}
	dst, err := free(to, o.name, reserve)
	if err == nil && rejected {
		err = writeReport(to, dst, rep)
	}
	moved := false
	if err == nil {
		moved, err = w.move(o, drop, to, dst)
	}
	if err == nil && !moved && o.b == nil {
		to.remove(dst + ".report.json")
		return false
	}
	if err == nil && !moved {
		err = to.writeFile(dst, o.b, o.fi.Mode().Perm())
		w.log().Info("ASAP_FILE_REPLACED", "file", o.name, "kept_as", sub+"/"+dst,
			"detail", "the name no longer refers to the file that was read (replaced, removed or written to since): what was read is kept; the name is left for the next look")
	}
	if err != nil {
		if rejected && dst != "" {
			to.remove(dst + ".report.json") // the file stays; so does nothing of its move
		}
		w.setAside(o.name, reasonCannotMove, err)
		return false
	}
	delete(w.notes, o.name)
	w.Counter.File(rejected)
	attrs := []any{"file", o.name, "records", rep.Records, "stored", rep.Stored, "duplicates", rep.Duplicates}
	if dst != o.name {
		attrs = append(attrs, "kept_as", dst)
	}
	if !rejected {
		w.log().Info("ASAP_FILE_DONE", attrs...)
		return true
	}
	w.log().Warn("ASAP_FILE_REJECTED", append(attrs, "rejected_records", rep.rejected(), "file_errors", len(rep.Errors),
		"report", dst+".report.json")...)
	return true
}

// writeReport writes rep beside dst in folder to, durably.
func writeReport(to *dir, dst string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := to.writeFile(dst+".report.json", append(b, '\n'), 0o660); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	return nil
}

// testHookBeforeRename, when set, runs between move's last look at a
// name and its rename: tests replace the file, or the folder, there.
var testHookBeforeRename func(path string)

// move renames the opened file from the drop folder to dst in folder to
// only if its name still refers to it, unchanged; moved is false when it
// does not. The name can change hands, or the file be written, between
// that look and the rename, so what arrived is looked at too: a file that
// is not the one read, or no longer holds the bytes read, is put back in
// the drop folder, to be read again at the next scan. A folder swapped
// for another during the move is an error: the file is put back.
func (w *Watcher) move(o *opened, drop, to *dir, dst string) (moved bool, err error) {
	if !o.at(drop) {
		return false, nil
	}
	if testHookBeforeRename != nil {
		testHookBeforeRename(o.path)
	}
	if !drop.holds(to.name, to) {
		return false, fmt.Errorf("move to %s: %w", to.name, errNotFolder)
	}
	if err := rename(drop, o.name, to, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // removed in between
		}
		return false, fmt.Errorf("move to %s: %w", to.name, err)
	}
	swapped := !drop.holds(to.name, to)
	if !swapped && to.is(dst, o.fi) && o.unchanged() {
		return true, nil
	}
	back, err := free(drop, o.name, 0)
	if err == nil {
		err = rename(to, dst, drop, back)
	}
	if err != nil {
		return false, fmt.Errorf("put back a file that is not the one read, from %s: %w", to.name, err)
	}
	if swapped {
		return false, fmt.Errorf("move to %s: %w", to.name, errNotFolder)
	}
	return false, nil
}
