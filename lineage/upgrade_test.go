package lineage_test

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/queue"
)

// TestAdoptALeftoverOfAnOlderSchema: a compaction's leftover written by
// an agent of schema 2, beside a missing data file, can be adopted (the
// read-only check accepts the older layout of the same store), and the
// adopted file is upgraded when it is opened, with every movement it held.
func TestAdoptALeftoverOfAnOlderSchema(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "queue", "testdata", "v2.db.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agent.db")
	if err := os.WriteFile(path+queue.CompactSuffix, v2, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := lineage.Adopt(path, "S0099", "local:test", "wrong store"); err == nil {
		t.Fatal("adopted another store's file")
	}
	d, err := lineage.Adopt(path, store, "local:test", "the PC was moved")
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	q, err := queue.Open(queue.Options{Path: path, StoreID: store, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Verify(); err != nil {
		t.Fatal(err)
	}
	s, err := q.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// The counts schema 2 held (queue/testdata/v2.json.gz).
	if s.SchemaVersion != queue.SchemaVersion || s.Count(queue.Pending) != 405 || s.Count(queue.Synced) != 1366 || s.Count(queue.Quarantined) != 159 || s.Count(queue.Purged) != 10 || d.LastSeq != 2347 {
		t.Fatalf("adopted file: schema %d, pending %d, synced %d, quarantined %d, purged %d, last sequence %d", s.SchemaVersion, s.Count(queue.Pending), s.Count(queue.Synced), s.Count(queue.Quarantined), s.Count(queue.Purged), d.LastSeq)
	}
}
