package asap

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strings"
)

// Why a file is set aside: left in the folder, counted and logged once
// (ASAP_FILE_SET_ASIDE), tried again at every scan, and forgotten once
// taken or gone. Nothing is moved that was not read: a file the agent
// cannot open or read is often one its writer still holds (on Windows, a
// sharing violation) or one an operator can fix in place.
const (
	reasonNotRegular = "not_regular" // a link, FIFO, device or folder
	reasonUnreadable = "unreadable"  // cannot be opened or read
	reasonChanged    = "changed"     // written to while it was read
	reasonCannotMove = "cannot_move" // stored, but its move (or report) failed
)

// maxAsideLogs bounds the ASAP_FILE_SET_ASIDE lines of one scan: a folder
// filled with entries the agent cannot take is logged in a few lines, the
// rest counted in one (ASAP_FILES_SET_ASIDE), and all of them in status.
const maxAsideLogs = 20

// reasonAction says what happens next, or what to do, for each reason.
var reasonAction = map[string]string{
	reasonNotRegular: "the folder takes regular files only: move it out of the folder",
	reasonUnreadable: "let the service's account read it (or close the program holding it): it is taken at the next look",
	reasonChanged:    "it is read again at the next look, once its writer is done",
	reasonCannotMove: "its movements are stored, but it could not be moved out: check that done/ and rejected/ are writable; it is taken again (its movements as duplicates) at the next look",
}

// setAside notes that the file name cannot be taken now, and why: counted
// and logged when it is set aside, and again only when the reason changes.
// The error's text names no path (the file is named on its own).
func (w *Watcher) setAside(name, reason string, err error) {
	if w.notes == nil {
		w.notes = map[string]string{}
	}
	if w.notes[name] == reason {
		return
	}
	w.notes[name] = reason
	w.Counter.FileSetAside()
	if w.asideLogged++; w.asideLogged > maxAsideLogs {
		return
	}
	level := slog.LevelWarn
	if reason == reasonChanged {
		level = slog.LevelInfo
	}
	attrs := []any{"file", name, "reason", reason}
	if err != nil {
		attrs = append(attrs, "error", errText(err))
	}
	w.log().Log(context.Background(), level, "ASAP_FILE_SET_ASIDE", append(attrs, "action", reasonAction[reason])...)
}

// forget ends a scan: it drops the notes of files no longer in the folder
// (present holds the names it lists), counts those left, and logs how
// many were set aside in this scan without a line of their own.
func (w *Watcher) forget(present map[string]bool) {
	for n := range w.notes {
		if !present[n] {
			delete(w.notes, n)
		}
	}
	w.Counter.SetAside(len(w.notes))
	if more := w.asideLogged - maxAsideLogs; more > 0 {
		w.log().Warn("ASAP_FILES_SET_ASIDE", "not_logged", more, "set_aside", len(w.notes),
			"action", "more files were set aside than are logged one by one: see the folder")
	}
	w.asideLogged = 0
}

// errText is err's text without the paths an *fs.PathError or an
// *os.LinkError carries (the file is named on its own).
func errText(err error) string {
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = strings.Replace(msg, pe.Error(), pe.Op+": "+pe.Err.Error(), 1)
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		msg = strings.Replace(msg, le.Error(), le.Op+": "+le.Err.Error(), 1)
	}
	return msg
}

// kind names what a non-regular file is.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	case m.IsDir():
		return "folder"
	}
	return "file that is not a regular file"
}
