package asap

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// firstErr is a context whose first Err runs fn: a scan asks for Err
// after it read the folder and before it opens the first file, so fn runs
// between the two.
type firstErr struct {
	context.Context
	once sync.Once
	fn   func()
}

func (c *firstErr) Err() error {
	c.once.Do(c.fn)
	return c.Context.Err()
}

// TestFIFOSwappedInDoesNotBlock: between the folder's read and the open,
// a regular file becomes a FIFO, or a symbolic link to one. The open used
// to follow the link and wait for a writer for ever, and the folder took
// nothing more. Now it opens without following links and without
// blocking, sets the entry aside and takes the next file.
func TestFIFOSwappedInDoesNotBlock(t *testing.T) {
	for _, how := range []string{"a FIFO", "a symbolic link to a FIFO"} {
		t.Run(how, func(t *testing.T) {
			w, q := newWatcher(t)
			fifo := filepath.Join(t.TempDir(), "fifo")
			must(t, syscall.Mkfifo(fifo, 0o600))
			// Should the open block, a writer ends the wait after the
			// test failed, so that the scan's goroutine returns.
			t.Cleanup(func() {
				if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
			})
			a := filepath.Join(w.Dir, "a.asap")
			must(t, os.WriteFile(a, asapOne("A1", "RXA", 0), 0o600))
			must(t, os.WriteFile(filepath.Join(w.Dir, "b.asap"), asapOne("B1", "RXB", 0), 0o600))
			ctx := &firstErr{Context: context.Background(), fn: func() {
				must(t, os.Remove(a))
				if how == "a FIFO" {
					must(t, syscall.Mkfifo(a, 0o600))
				} else {
					must(t, os.Symlink(fifo, a))
				}
			}}
			reps := scanBounded(t, w, ctx)
			if len(reps) != 1 || reps[0].File != "b.asap" || reps[0].Stored != 1 {
				t.Fatalf("reports %+v, want b.asap taken", reps)
			}
			if _, ok := pending(t, q)["asap:RXB:0:20260301"]; !ok {
				t.Error("b.asap's dispense not stored")
			}
			if fi, err := os.Lstat(a); err != nil || fi.Mode().IsRegular() {
				t.Errorf("a.asap: %v, %v; want it left in the folder as it is", fi, err)
			}
			if in := snapshot(w); in.FilesSetAside != 1 || in.FilesSetAsideTotal != 1 {
				t.Errorf("set aside %d now, %d in all; want 1 and 1", in.FilesSetAside, in.FilesSetAsideTotal)
			}
			// Looked at again: still set aside, counted once.
			scanBounded(t, w, context.Background())
			if in := snapshot(w); in.FilesSetAside != 1 || in.FilesSetAsideTotal != 1 {
				t.Errorf("after a second scan: set aside %d now, %d in all; want 1 and 1", in.FilesSetAside, in.FilesSetAsideTotal)
			}
			// Gone: forgotten.
			must(t, os.Remove(a))
			scanBounded(t, w, context.Background())
			if in := snapshot(w); in.FilesSetAside != 0 {
				t.Errorf("after it went: %d set aside, want 0", in.FilesSetAside)
			}
		})
	}
}

// TestUnreadableFileDoesNotStopTheScan: a file the agent may not read used
// to end every scan there, so the files after it in name order were never
// taken. Now it is set aside, left in place, and taken once it can be
// read.
func TestUnreadableFileDoesNotStopTheScan(t *testing.T) {
	w, q := newWatcher(t)
	a := filepath.Join(w.Dir, "a.asap")
	must(t, os.WriteFile(a, asapOne("A1", "RXA", 0), 0o000))
	must(t, os.WriteFile(filepath.Join(w.Dir, "b.asap"), asapOne("B1", "RXB", 0), 0o600))
	var reps []Report
	var err error
	withoutFileAccessOverride(t, func() { reps, err = w.Scan(context.Background()) })
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	if len(reps) != 1 || reps[0].File != "b.asap" || reps[0].Stored != 1 {
		t.Fatalf("reports %+v, want b.asap taken", reps)
	}
	if _, err := os.Stat(a); err != nil {
		t.Errorf("a.asap left the folder: %v", err)
	}
	if in := snapshot(w); in.FilesSetAside != 1 {
		t.Errorf("%d set aside, want 1", in.FilesSetAside)
	}
	must(t, os.Chmod(a, 0o600))
	reps = scanBounded(t, w, context.Background())
	if len(reps) != 1 || reps[0].File != "a.asap" || reps[0].Stored != 1 {
		t.Fatalf("once readable: reports %+v, want a.asap taken", reps)
	}
	if in := snapshot(w); in.FilesSetAside != 0 || len(pending(t, q)) != 2 {
		t.Errorf("%d set aside, %d stored; want 0 and 2", in.FilesSetAside, len(pending(t, q)))
	}
}

// withoutFileAccessOverride runs fn so that file permissions hold for it,
// failing the test if it does not return within a minute; fn must not
// end the test itself. Tests may run as root, whom permission bits do not
// stop: then fn runs on a thread of its own without CAP_DAC_OVERRIDE and
// CAP_DAC_READ_SEARCH (capabilities are a thread's; the runtime starts
// new threads from a clean one, and ends this one after fn, since it stays
// locked), so fn must do its file operations on its own goroutine, as a
// scan does. Where capabilities cannot be changed, the test is skipped,
// saying so.
func withoutFileAccessOverride(t *testing.T, fn func()) {
	t.Helper()
	ready, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
		if os.Geteuid() == 0 {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if err := dropFileAccessOverride(); err != nil {
				ready <- err
				return
			}
		}
		ready <- nil
		fn()
	}()
	if err := <-ready; err != nil {
		t.Skipf("running as root, and a thread's capabilities cannot be dropped (%v): no file can be unreadable", err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("did not return within a minute")
	}
}

// dropFileAccessOverride takes CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH
// out of the calling thread's effective capabilities.
func dropFileAccessOverride() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Effective &^= 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH
	return unix.Capset(&hdr, &data[0])
}

// TestManySetAsideLogFewLines: a folder filled with entries the agent
// cannot take is counted whole, and logged in a bounded number of lines
// a scan, once.
func TestManySetAsideLogFewLines(t *testing.T) {
	w, _ := newWatcher(t)
	var logs bytes.Buffer
	w.Log = slog.New(slog.NewTextHandler(&logs, nil))
	const n = 5 * maxAsideLogs
	for i := range n {
		must(t, syscall.Mkfifo(filepath.Join(w.Dir, fmt.Sprintf("f%03d.asap", i)), 0o600))
	}
	scanBounded(t, w, context.Background())
	scanBounded(t, w, context.Background())
	if in := snapshot(w); in.FilesSetAside != n || in.FilesSetAsideTotal != n {
		t.Errorf("set aside %d now, %d in all; want %d", in.FilesSetAside, in.FilesSetAsideTotal, n)
	}
	lines := strings.Count(logs.String(), "\n")
	if lines != maxAsideLogs+1 || !strings.Contains(logs.String(), "ASAP_FILES_SET_ASIDE not_logged="+strconv.Itoa(n-maxAsideLogs)) {
		t.Errorf("%d log lines, want %d and a count of the rest:\n%s", lines, maxAsideLogs+1, logs.String())
	}
}
