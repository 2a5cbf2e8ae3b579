package queue

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// cutShortChildEnv names the directory TestCompactLeftoverCutShortChild
// works in; the child does nothing without it.
const cutShortChildEnv = "RXEDGE_COMPACT_CUT_SHORT_DIR"

// TestCompactLeftoverCutShort: a compaction's new file is synced only
// before its rename, so a power cut during the copy can leave a
// <path>.compact whose meta pages name pages past its end. Reading such a
// file through bbolt's memory map raises SIGBUS, which kills the process:
// the start-up check, the compaction check and the next compaction must
// take it for what it is, a copy cut short. The checks run in a child
// process (this test binary again), so a fault fails this test with the
// child's stack instead of killing the package's whole run.
func TestCompactLeftoverCutShort(t *testing.T) {
	dir := t.TempDir()
	fixture{filler: 300, pending: 60, synced: 60, quarantined: 5, noteLen: 100}.build(t, filepath.Join(dir, "agent.db"))
	cmd := exec.Command(os.Args[0], "-test.run=^TestCompactLeftoverCutShortChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), cutShortChildEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the checks of a leftover cut short failed (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestCompactLeftoverCutShortChild") {
		t.Fatalf("the child did not run its checks:\n%s", out)
	}
}

// TestCompactLeftoverCutShortChild is the child of
// TestCompactLeftoverCutShort: for every length, in whole pages, shorter
// than the pages the copy's meta names, it puts the copy cut to that length beside the
// data file and checks that nothing reads past its end.
func TestCompactLeftoverCutShortChild(t *testing.T) {
	dir := os.Getenv(cutShortChildEnv)
	if dir == "" {
		t.Skip("run by TestCompactLeftoverCutShort")
	}
	path := filepath.Join(dir, "agent.db")
	want := takeSnapshot(t, path)
	// A copy of the file is what a finished copy looks like.
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Its high-water mark: bbolt grows a file ahead of its pages, so the
	// pages past the mark are not needed.
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var hwm int64
	db.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil })
	db.Close()
	const page = 4096
	if hwm%page != 0 || hwm < 8*page || hwm > int64(len(full)) {
		t.Fatalf("fixture of %d bytes, high-water mark %d: want whole pages, at least 8", len(full), hwm)
	}
	leftover := path + CompactSuffix
	put := func(n int) {
		t.Helper()
		if err := os.WriteFile(leftover, full[:n], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pages := int(hwm / page)
	for k := 1; k < pages; k++ {
		n := k * page
		put(n)
		if f := readFacts(leftover); f.ok {
			t.Fatalf("a copy cut to %d of %d pages reads as a complete data file", k, pages)
		}
		if err := CheckLeftovers(path); err != nil {
			t.Fatalf("start-up check beside a copy cut to %d of %d pages: %v", k, pages, err)
		}
		if _, _, err := CompactionNeeded(path); err != nil {
			t.Fatalf("compaction check beside a copy cut to %d of %d pages: %v", k, pages, err)
		}
		noLeftover(t, path)
	}
	// The copy up to its high-water mark is complete, and held by the
	// data file.
	put(int(hwm))
	if f := readFacts(leftover); !f.ok {
		t.Fatalf("the copy cut at its high-water mark (%d of %d bytes) does not read as a data file", hwm, len(full))
	}
	if err := CheckLeftovers(path); err != nil {
		t.Fatalf("start-up check beside a complete copy: %v", err)
	}

	// A compaction replaces a leftover cut short, at a few lengths.
	for _, k := range []int{1, 2, 3, 4, pages / 2, pages - 1} {
		put(k * page)
		if _, err := Compact(path, CompactOptions{}); err != nil {
			t.Fatalf("compaction beside a copy cut to %d of %d pages: %v", k, pages, err)
		}
		noLeftover(t, path)
		if err := takeSnapshot(t, path).sameAs(want); err != nil {
			t.Fatalf("after compacting beside a copy cut to %d pages: %v", k, err)
		}
	}

	// With the data file missing, a leftover cut short is refused, and not
	// offered for adoption: it is not a complete data file.
	if err := os.Rename(path, filepath.Join(dir, "aside.db")); err != nil {
		t.Fatal(err)
	}
	put(pages / 2 * page)
	var le *LeftoverError
	if err := CheckLeftovers(path); !errors.As(err, &le) || le.Adoptable {
		t.Fatalf("start-up check of a missing file beside a copy cut short = %v, want a refusal that offers no adoption", err)
	}
}
