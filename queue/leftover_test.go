package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyFile copies a closed data file byte for byte, as a backup does.
func copyDataFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMissingFileWithCompactLeftoverIsRefused: a data file missing with a
// complete compaction copy beside it is not replaced by an empty file,
// and the refusal says what was found and the commands that decide.
func TestMissingFileWithCompactLeftoverIsRefused(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openTest(t, path, clk)
	enqueueN(t, q, "m", 7)
	id := q.Lineage().FileID
	q.Close()
	if err := os.Rename(path, path+CompactSuffix); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Options{Path: path, StoreID: testStore})
	var le *LeftoverError
	if !errors.As(err, &le) || !errors.Is(err, ErrLeftover) || !le.Adoptable {
		t.Fatalf("open over a leftover = %v, want a LeftoverError that can be adopted", err)
	}
	for _, want := range []string{"agent.db.compact", id, "last sequence 7", "agent data adopt", "agent data discard"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a data file was created over the leftover: %v", err)
	}
}

// TestMissingFileWithMarkerIsRefused: a directory whose marker names a
// data file that is gone does not get an empty file.
func TestMissingFileWithMarkerIsRefused(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openLineage(t, path, clk)
	id := q.Lineage().FileID
	q.Close()
	if m, _ := os.ReadFile(path + MarkerSuffix); strings.TrimSpace(string(m)) != id {
		t.Fatalf("marker = %q, want %s", m, id)
	}
	os.Remove(path)
	_, err := Open(Options{Path: path, StoreID: testStore, Lineage: true})
	if !errors.Is(err, ErrLeftover) || !strings.Contains(err.Error(), id) {
		t.Fatalf("open with the file gone = %v, want a refusal naming %s", err, id)
	}
	if err := CheckLeftovers(path); !errors.Is(err, ErrLeftover) {
		t.Fatalf("CheckLeftovers = %v", err)
	}
}

// TestReplacedFileIsRefused: a data file that is not the one the marker
// names (copied in from elsewhere) is refused until adopted.
func TestReplacedFileIsRefused(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.db")
	q := openLineage(t, path, clk)
	q.Close()
	other := filepath.Join(t.TempDir(), "agent.db")
	q2 := openTest(t, other, clk)
	q2.Close()
	copyDataFile(t, other, path)
	if err := CheckLeftovers(path); !errors.Is(err, ErrLeftover) || !strings.Contains(err.Error(), "was replaced") {
		t.Fatalf("CheckLeftovers = %v, want a refusal of the replaced file", err)
	}
}

// TestCompactKeepsForeignLeftover: neither compaction nor its start-up
// check deletes a leftover .compact that may hold acknowledged movements
// (another file, or the same file further along); a copy cut short or
// no further along is removed.
func TestCompactKeepsForeignLeftover(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.db")
	old := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
	enqueueN(t, old, "old", 20)
	old.Close()
	q := openTest(t, path, clk)
	enqueueN(t, q, "new", 2)
	q.Close()
	copyDataFile(t, old.Path(), path+CompactSuffix)

	if _, err := Compact(path, CompactOptions{Reason: "test"}); !errors.Is(err, ErrLeftover) {
		t.Fatalf("compact beside a foreign leftover = %v, want ErrLeftover", err)
	}
	if _, _, err := CompactionNeeded(path); !errors.Is(err, ErrLeftover) {
		t.Fatalf("compaction check beside a foreign leftover = %v, want ErrLeftover", err)
	}
	if f := readFacts(path + CompactSuffix); !f.ok || f.lastSeq != 20 {
		t.Fatalf("leftover changed: %+v", f)
	}

	// A copy of the data file itself, no further along: removed.
	copyDataFile(t, path, path+CompactSuffix)
	if _, err := Compact(path, CompactOptions{Reason: "test"}); err != nil {
		t.Fatalf("compact beside its own stale copy: %v", err)
	}
	if _, err := os.Stat(path + CompactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale copy kept: %v", err)
	}
	// Bytes that are no data file (a copy cut short): removed.
	os.WriteFile(path+CompactSuffix, []byte("partial"), 0o600)
	if _, _, err := CompactionNeeded(path); err != nil {
		t.Fatalf("compaction check beside a partial copy: %v", err)
	}
	if _, err := os.Stat(path + CompactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("partial copy kept: %v", err)
	}
}

// TestRestoredFileStartsAgain: a file that took a new identity as a
// restored copy (Confirm) is not refused at the next start as a file that
// replaced itself: the marker follows the identity.
func TestRestoredFileStartsAgain(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openLineage(t, path, clk)
	if _, err := q.Confirm(CentralRecord{}); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "a", 4)
	old := q.Lineage().FileID
	q.Close()

	q = openLineage(t, path, clk)
	c, err := q.Confirm(CentralRecord{Highest: 40, FileID: old})
	if err != nil || c.Origin != OriginRestored || c.FileID == old {
		t.Fatalf("confirm of a restored copy: %+v, %v", c, err)
	}
	if m := markerIDs(t, path); fmt.Sprint(m) != fmt.Sprint([]string{c.FileID}) {
		t.Fatalf("marker names %q once the file is file %s", m, c.FileID)
	}
	q.Close()
	if err := CheckLeftovers(path); err != nil {
		t.Fatalf("the start after a restore is refused: %v", err)
	}
	q = openLineage(t, path, clk)
	if got := q.Lineage().FileID; got != c.FileID {
		t.Fatalf("file %s after the restart, want %s", got, c.FileID)
	}
}

// markerIDs is what the marker beside path names, line by line.
func markerIDs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path + MarkerSuffix)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestMarkerNamingTwoIdentities: a marker left naming two identities (a
// stop while a restored copy took its new one) lets the file start with
// either, and the next open names the file's alone; a missing file's
// refusal names both.
func TestMarkerNamingTwoIdentities(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "agent.db")
	q := openLineage(t, path, clk)
	id := q.Lineage().FileID
	q.Close()
	for _, ids := range [][]string{{id, "next-id"}, {"before-id", id}} {
		if err := writeMarker(path, ids...); err != nil {
			t.Fatal(err)
		}
		if err := CheckLeftovers(path); err != nil {
			t.Fatalf("marker %q: %v", ids, err)
		}
		q := openLineage(t, path, clk)
		q.Close()
		if m := markerIDs(t, path); fmt.Sprint(m) != fmt.Sprint([]string{id}) {
			t.Fatalf("marker %q after an open, want %s alone", m, id)
		}
	}
	if err := writeMarker(path, "before-id", "next-id"); err != nil {
		t.Fatal(err)
	}
	if err := CheckLeftovers(path); !errors.Is(err, ErrLeftover) || !strings.Contains(err.Error(), "before-id or next-id") {
		t.Fatalf("a marker naming two other files: %v", err)
	}
	os.Remove(path)
	if err := CheckLeftovers(path); !errors.Is(err, ErrLeftover) || !strings.Contains(err.Error(), "before-id or next-id") {
		t.Fatalf("a missing file: %v", err)
	}
}
