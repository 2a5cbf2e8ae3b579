package asap

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rxedge/agent/internal/disk"
)

// asapOne is a complete file of one valid dispense, rx, under control
// number ctl; pad lengthens it (a PAT of that many letters, which is not
// read).
func asapOne(ctl, rx string, pad int) []byte {
	return []byte("TH*4.2A*" + ctl + "*01**20260302*101500*P**~~\nPAT*NY*06*" + strings.Repeat("X", pad) + "~\n" +
		"DSP*00*" + rx + "*20260301*0*20260301*00*01*00406055262*10**01~\nTT*" + ctl + "*4~\n")
}

// onFirstNow runs fn the first time the watcher reads its clock: a take
// reads it once, after it read the file and before it stores and moves
// it, so fn runs between the read and the move.
func onFirstNow(w *Watcher, fn func()) {
	var once atomic.Bool
	w.Sink.Clock = func() time.Time {
		if once.CompareAndSwap(false, true) {
			fn()
		}
		return time.Now()
	}
}

// scanBounded runs a scan, failing the test if it does not return within
// a minute (a scan that waits for ever, in an open or a loop).
func scanBounded(t *testing.T, w *Watcher, ctx context.Context) []Report {
	t.Helper()
	type result struct {
		reps []Report
		err  error
	}
	done := make(chan result, 1)
	go func() {
		reps, err := w.Scan(ctx)
		done <- result{reps, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("scan: %v", r.err)
		}
		return r.reps
	case <-time.After(time.Minute):
		t.Fatal("the scan did not return within a minute")
		return nil
	}
}

// TestReplacedWhileReadIsNotLost: a writer puts the next file under the
// same name while the first is being read, by renaming it over the name
// or by writing into the same file. The folder used to move whatever was
// at the name to done/, so the second file went there unread and none of
// its dispenses was stored. Now the first is stored and kept in done/ as
// it was read, and the second is taken at the next scan.
func TestReplacedWhileReadIsNotLost(t *testing.T) {
	for _, how := range []string{"renamed over", "written in place"} {
		t.Run(how, func(t *testing.T) {
			w, q := newWatcher(t)
			path := filepath.Join(w.Dir, "daily.asap")
			first, second := asapOne("D1", "RXFIRST", 0), asapOne("D2", "RXSECOND", 40)
			if err := os.WriteFile(path, first, 0o600); err != nil {
				t.Fatal(err)
			}
			onFirstNow(w, func() {
				if how == "written in place" {
					must(t, os.WriteFile(path, second, 0o600))
					return
				}
				must(t, os.WriteFile(path+".part", second, 0o600))
				must(t, os.Rename(path+".part", path))
			})
			scanBounded(t, w, context.Background())
			scanBounded(t, w, context.Background())
			got := pending(t, q)
			for _, id := range []string{"asap:RXFIRST:0:20260301", "asap:RXSECOND:0:20260301"} {
				if _, ok := got[id]; !ok {
					t.Errorf("%s not stored; stored %v", id, keys(got))
				}
			}
			if _, err := os.Lstat(path); err == nil {
				t.Error("a file is left in the folder")
			}
			// done/ holds both, each as it was read.
			for _, c := range []struct {
				name string
				want []byte
			}{{"daily.asap", first}, {"daily.asap.1", second}} {
				b, err := os.ReadFile(filepath.Join(w.Dir, DoneDir, c.name))
				if err != nil || string(b) != string(c.want) {
					t.Errorf("done/%s: %q, %v; want %q", c.name, b, err, c.want)
				}
			}
		})
	}
}

// TestLongNamesFit: a file whose name is at the file system's limit is
// taken like any other. Its report's name used to be too long to write,
// which ended the scan before the files after it, for good; and the
// second copy of such a name in done/ ("NAME.1") was looked for for ever,
// the watcher spinning on one core. Now names that would not fit are cut
// and end in a hash of the whole name.
func TestLongNamesFit(t *testing.T) {
	w, q := newWatcher(t)
	limit := disk.NameMax(w.Dir)
	long := strings.Repeat("a", limit-len(".asap")) + ".asap"
	must(t, os.WriteFile(filepath.Join(w.Dir, long), []byte("TH*4.1*C1*01**20260302*101500*P**~~TT*C1*2~"), 0o600))
	must(t, os.WriteFile(filepath.Join(w.Dir, "b.asap"), asapOne("B1", "RXB", 0), 0o600))
	reps := scanBounded(t, w, context.Background())
	if len(reps) != 2 || len(reps[0].Errors) != 1 || reps[0].Errors[0].Field != "TH01" || reps[1].Stored != 1 {
		t.Fatalf("reports %+v, want the long name rejected (TH01) and b.asap stored", reps)
	}
	ents, err := os.ReadDir(filepath.Join(w.Dir, RejectedDir))
	if err != nil || len(ents) != 2 || ents[0].Name()+".report.json" != ents[1].Name() {
		t.Fatalf("rejected/ holds %v (%v), want the file and its report", ents, err)
	}
	for _, e := range ents {
		if n := e.Name(); len(n) > limit || !strings.HasPrefix(n, "aaaa") {
			t.Errorf("rejected/%s: %d bytes, want at most %d, beginning as the file's name", n, len(n), limit)
		}
	}
	var rep Report
	rb, err := os.ReadFile(filepath.Join(w.Dir, RejectedDir, ents[1].Name()))
	if err != nil || json.Unmarshal(rb, &rep) != nil || rep.File != long {
		t.Errorf("the report names %q (%v), want the file's own name", rep.File, err)
	}

	// The same long name, valid, dropped twice: both copies kept in done/.
	for i, rx := range []string{"RXL1", "RXL2"} {
		must(t, os.WriteFile(filepath.Join(w.Dir, long), asapOne("L1", rx, 0), 0o600))
		reps := scanBounded(t, w, context.Background())
		if len(reps) != 1 || reps[0].Stored != 1 {
			t.Fatalf("drop %d: reports %+v", i+1, reps)
		}
	}
	done := entries(t, filepath.Join(w.Dir, DoneDir))
	if len(done) != 3 || len(pending(t, q)) != 3 {
		t.Fatalf("done/ holds %q and %d are stored, want b.asap and two copies of the long name, 3 stored", done, len(pending(t, q)))
	}
	for _, n := range done {
		if len(n) > limit {
			t.Errorf("done/%s is %d bytes long, more than %d", n, len(n), limit)
		}
	}
}

// TestRunStopsWhileAtWork: Run returns once its context ends, whether the
// folder holds a file it is storing or the same long name dropped twice
// (which used to spin for ever, so the agent could not stop).
func TestRunStopsWhileAtWork(t *testing.T) {
	w, _ := newWatcher(t)
	w.Poll = 10 * time.Millisecond
	long := strings.Repeat("b", disk.NameMax(w.Dir)-len(".asap")) + ".asap"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The stop comes while c.asap is taken, between its read and its move.
	var stopping atomic.Bool
	w.Sink.Clock = func() time.Time {
		if stopping.Load() {
			cancel()
		}
		return time.Now()
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	for i, rx := range []string{"RXR1", "RXR2"} {
		must(t, os.WriteFile(filepath.Join(w.Dir, "long.tmp"), asapOne("R1", rx, 0), 0o600))
		must(t, os.Rename(filepath.Join(w.Dir, "long.tmp"), filepath.Join(w.Dir, long)))
		waitUntil(t, "copy "+itoa(i+1)+" of the long name in done/", func() bool {
			return len(entries(t, filepath.Join(w.Dir, DoneDir))) == i+1
		})
	}
	stopping.Store(true)
	must(t, os.WriteFile(filepath.Join(w.Dir, "c.asap"), asapOne("C1", "RXC", 0), 0o600))
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of its context ending")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".report.json") {
			out = append(out, e.Name())
		}
	}
	return out
}

// waitUntil polls cond every 10ms until it holds, failing after a minute
// with what was awaited.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCannotMoveIsSetAside: when a taken file cannot be moved out (done/
// is not a folder here), its movements stay stored, it is set aside and
// the scan goes on; once done/ is back, it is taken, its movements found
// held.
func TestCannotMoveIsSetAside(t *testing.T) {
	w, q := newWatcher(t)
	done := filepath.Join(w.Dir, DoneDir)
	must(t, os.Remove(done))
	must(t, os.WriteFile(done, nil, 0o600))
	must(t, os.WriteFile(filepath.Join(w.Dir, "a.asap"), asapOne("A1", "RXA", 0), 0o600))
	must(t, os.WriteFile(filepath.Join(w.Dir, "b.asap"), asapOne("B1", "RXB", 0), 0o600))
	if reps := scanBounded(t, w, context.Background()); len(reps) != 0 {
		t.Fatalf("reports %+v, want none taken", reps)
	}
	if in := snapshot(w); in.FilesSetAside != 2 || len(pending(t, q)) != 2 {
		t.Fatalf("%d set aside, %d stored; want 2 and 2", in.FilesSetAside, len(pending(t, q)))
	}
	must(t, os.Remove(done))
	must(t, os.Mkdir(done, 0o700))
	reps := scanBounded(t, w, context.Background())
	if len(reps) != 2 || reps[0].Duplicates != 1 || reps[1].Duplicates != 1 {
		t.Fatalf("reports %+v, want both taken, as duplicates", reps)
	}
	if in := snapshot(w); in.FilesSetAside != 0 || in.FilesSetAsideTotal != 2 || in.FilesDone != 2 {
		t.Errorf("%d set aside now, %d in all, %d done; want 0, 2, 2", in.FilesSetAside, in.FilesSetAsideTotal, in.FilesDone)
	}
}

// TestReplacedJustBeforeTheMove: a file renamed over the name between the
// watcher's last look at it and its rename is moved to done/ instead of
// the file read; the watcher sees that what arrived is not what it read,
// puts it back, keeps what it read, and takes the other at the next scan.
func TestReplacedJustBeforeTheMove(t *testing.T) {
	w, q := newWatcher(t)
	path := filepath.Join(w.Dir, "daily.asap")
	first, second := asapOne("D1", "RXFIRST", 0), asapOne("D2", "RXSECOND", 40)
	must(t, os.WriteFile(path, first, 0o600))
	var once atomic.Bool
	testHookBeforeRename = func(p string) {
		if p == path && once.CompareAndSwap(false, true) {
			must(t, os.WriteFile(path+".part", second, 0o600))
			must(t, os.Rename(path+".part", path))
		}
	}
	t.Cleanup(func() { testHookBeforeRename = nil })
	scanBounded(t, w, context.Background())
	if b, err := os.ReadFile(path); err != nil || string(b) != string(second) {
		t.Fatalf("the drop folder holds %q, %v; want the second file put back", b, err)
	}
	scanBounded(t, w, context.Background())
	got := pending(t, q)
	for _, id := range []string{"asap:RXFIRST:0:20260301", "asap:RXSECOND:0:20260301"} {
		if _, ok := got[id]; !ok {
			t.Errorf("%s not stored; stored %v", id, keys(got))
		}
	}
	for _, c := range []struct {
		name string
		want []byte
	}{{"daily.asap", first}, {"daily.asap.1", second}} {
		b, err := os.ReadFile(filepath.Join(w.Dir, DoneDir, c.name))
		if err != nil || string(b) != string(c.want) {
			t.Errorf("done/%s: %q, %v; want %q", c.name, b, err, c.want)
		}
	}
}

// TestDoneMustBeAFolder: done/ replaced by a link to another folder (the
// drop folder's writers can do that) is not followed: files are set
// aside, and nothing lands where the link points.
func TestDoneMustBeAFolder(t *testing.T) {
	w, q := newWatcher(t)
	elsewhere := t.TempDir()
	done := filepath.Join(w.Dir, DoneDir)
	must(t, os.Remove(done))
	if err := os.Symlink(elsewhere, done); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(w.Dir, "a.asap"), asapOne("A1", "RXA", 0), 0o600))
	if reps := scanBounded(t, w, context.Background()); len(reps) != 0 {
		t.Fatalf("reports %+v, want none taken", reps)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("the link's target holds %d entries, want none", len(ents))
	}
	// Set aside: a.asap, its movements stored, and the link itself.
	if in := snapshot(w); in.FilesSetAside != 2 || len(pending(t, q)) != 1 {
		t.Errorf("%d set aside, %d stored; want 2 and 1", in.FilesSetAside, len(pending(t, q)))
	}
}

// TestFolderSwappedDuringTheMoveIsNotFollowed: a writer of the drop
// folder swaps done/ (or rejected/) for a link to a folder outside it
// between the watcher's last look and its rename. The watcher used to
// look the folder up by name for each step, so the file and its report
// landed where the link pointed. Now it moves and writes relative to the
// folders it opened without following a link: nothing lands outside, the
// file is left in the drop folder, set aside and counted, and it is taken
// once the folder is back.
func TestFolderSwappedDuringTheMoveIsNotFollowed(t *testing.T) {
	for _, c := range []struct {
		folder string
		file   []byte
	}{
		{DoneDir, asapOne("S1", "RXSWAP", 0)},
		{RejectedDir, []byte(strings.Replace(string(asapOne("S2", "RXSWAP", 0)), "*00406055262*", "*99999999999*", 1))},
	} {
		t.Run(c.folder, func(t *testing.T) {
			w, _ := newWatcher(t)
			outside := t.TempDir()
			folder := filepath.Join(w.Dir, c.folder)
			path := filepath.Join(w.Dir, "swap.asap")
			must(t, os.WriteFile(path, c.file, 0o600))
			var once atomic.Bool
			testHookBeforeRename = func(p string) {
				if p == path && once.CompareAndSwap(false, true) {
					must(t, os.Rename(folder, folder+".real"))
					if err := os.Symlink(outside, folder); err != nil {
						t.Errorf("no symbolic links here: %v", err)
					}
				}
			}
			t.Cleanup(func() { testHookBeforeRename = nil })
			if reps := scanBounded(t, w, context.Background()); len(reps) != 0 {
				t.Fatalf("reports %+v, want none taken", reps)
			}
			if got := entries(t, outside); len(got) != 0 {
				t.Errorf("outside the drop folder: %v, want nothing", got)
			}
			if got := entries(t, folder+".real"); len(got) != 0 {
				t.Errorf("in the swapped-out folder: %v, want nothing", got)
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != string(c.file) {
				t.Errorf("the drop folder holds %q, %v; want the file left in place", b, err)
			}
			if in := snapshot(w); in.FilesSetAside != 1 || in.FilesDone+in.FilesRejected != 0 {
				t.Errorf("%d set aside, %d done, %d rejected; want 1, 0, 0", in.FilesSetAside, in.FilesDone, in.FilesRejected)
			}
			must(t, os.Remove(folder))
			must(t, os.Rename(folder+".real", folder))
			if reps := scanBounded(t, w, context.Background()); len(reps) != 1 {
				t.Fatalf("reports %+v once the folder is back, want the file taken", reps)
			}
			if got := entries(t, folder); len(got) == 0 || got[0] != "swap.asap" {
				t.Errorf("%s/ holds %v, want swap.asap", c.folder, got)
			}
		})
	}
}

// TestRewrittenInPlaceIsNotMoved: a writer rewrites the file in place
// after the watcher read it (the same size) and puts its modification
// time back, as any owner may. Size and time said nothing changed, so the
// file went to done/ holding records never stored. Now what arrived in
// done/ is compared with what was read, from the descriptor: the file is
// put back and read again at the next scan, and done/ keeps what was read.
func TestRewrittenInPlaceIsNotMoved(t *testing.T) {
	w, q := newWatcher(t)
	path := filepath.Join(w.Dir, "daily.asap")
	first, second := asapOne("P1", "RXREAD", 10), asapOne("P2", "RXKEPT", 10)
	if len(first) != len(second) {
		t.Fatalf("the two files differ in size: %d and %d", len(first), len(second))
	}
	must(t, os.WriteFile(path, first, 0o600))
	fi, err := os.Stat(path)
	must(t, err)
	var once atomic.Bool
	testHookBeforeRename = func(p string) {
		if p == path && once.CompareAndSwap(false, true) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt(second, 0)
			must(t, err)
			must(t, f.Close())
			must(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
		}
	}
	t.Cleanup(func() { testHookBeforeRename = nil })
	scanBounded(t, w, context.Background())
	if b, err := os.ReadFile(path); err != nil || string(b) != string(second) {
		t.Fatalf("the drop folder holds %q, %v; want the rewritten file put back", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(w.Dir, DoneDir, "daily.asap")); err != nil || string(b) != string(first) {
		t.Fatalf("done/daily.asap holds %q, %v; want what was read", b, err)
	}
	scanBounded(t, w, context.Background())
	got := pending(t, q)
	for _, id := range []string{"asap:RXREAD:0:20260301", "asap:RXKEPT:0:20260301"} {
		if _, ok := got[id]; !ok {
			t.Errorf("%s not stored; stored %v", id, keys(got))
		}
	}
	if b, err := os.ReadFile(filepath.Join(w.Dir, DoneDir, "daily.asap.1")); err != nil || string(b) != string(second) {
		t.Errorf("done/daily.asap.1 holds %q, %v; want the rewritten file", b, err)
	}
}
