package powerloss

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// upgradeFixtures are data files of store S0042 written by the queues of
// schemas 2 and 3, in every state (see queue/testdata/fixturegen), which
// gave the same fixtureMovements movement ids.
var upgradeFixtures = []string{"../../queue/testdata/v2.db.gz", "../../queue/testdata/v3.db.gz"}

const fixtureMovements = 2190

// TestPowerLossDuringUpgrade cuts the power while the agent upgrades a
// data file of schema 2, and one of schema 3, at its start: the first
// round traces a whole upgrade, then each round puts the older file in a
// new data directory
// and cuts at another of the upgrade's filesystem requests (a sample in
// the short run; with RXEDGE_POWERLOSS=full, every request). After each
// cut the file opens, passes Verify, and says exactly what the file
// upgraded without a cut says: every key's state, sequence, central
// sequence, time, digest and record, every sequence's answer, counters,
// lineage and journal (less the agent's start entries).
func TestPowerLossDuringUpgrade(t *testing.T) {
	for _, f := range upgradeFixtures {
		t.Run(filepath.Base(f), func(t *testing.T) { powerLossDuringUpgrade(t, f) })
	}
}

func powerLossDuringUpgrade(t *testing.T, fixturePath string) {
	r := newRig(t)
	// The fixture's synced keys are months old: the start's prune must
	// keep them for the comparison.
	cfg := "sync:\n  resume_jitter: 10ms\nretention:\n  synced_keys: 87600h\n  journal: 87600h\n"
	if err := os.WriteFile(r.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	fixture := gunzipFile(t, fixturePath)
	refPath := filepath.Join(t.TempDir(), "agent.db")
	if err := os.WriteFile(refPath, fixture, 0o600); err != nil {
		t.Fatal(err)
	}
	want := upgradedState(t, refPath)

	ops := 0 // the filesystem requests of a start that upgrades
	rounds := 1 + cuts(5)
	for i := 0; i < rounds; i++ {
		dir := filepath.Join(r.mnt, fmt.Sprintf("up%02d", i))
		putDurably(t, dir, fixture)
		r.useDataDir(dir)
		point := 0
		if i == 0 {
			r.fs.Trace(true)
		} else {
			r.armTorn()
			point = 1 + (i-1)*ops/(rounds-1)
			if full() {
				point = min(i, ops)
			}
			r.fs.CutAfter(point)
		}
		before := r.fs.Seq()
		r.start(false)
		if i == 0 {
			ops = r.fs.Seq() - before
			r.fs.Trace(false)
			if full() && rounds < ops+1 {
				rounds = ops + 1
			}
			t.Logf("a start that upgrades makes %d changing filesystem requests", ops)
		}
		r.powerCycle()
		copied := filepath.Join(t.TempDir(), "agent.db")
		if err := copyFile(copied, filepath.Join(dir, "agent.db")); err != nil {
			t.Fatal(err)
		}
		if got := upgradedState(t, copied); got != want {
			t.Fatalf("cut %d (at request %d of %d): the upgraded file differs from the one upgraded without a cut:\ngot  %.2000s\nwant %.2000s", r.cuts, point, ops, got, want)
		}
	}
	r.summary()
}

func gunzipFile(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// putDurably makes dir holding agent.db with content, synced.
func putDurably(t *testing.T, dir string, content []byte) {
	t.Helper()
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "agent.db"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		t.Fatal(err)
	}
}

// upgradedState opens the file at path (which upgrades it), checks it,
// and returns what it says, as JSON.
func upgradedState(t *testing.T, path string) string {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: path, StoreID: storeID})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer q.Close()
	if err := q.Verify(); err != nil {
		t.Fatalf("Verify %s: %v", path, err)
	}
	var s struct {
		Stats      queue.Stats
		Keys       map[string]queue.Entry
		Lookup     queue.Lookup
		Events     []queue.Event
		Lineage    queue.Lineage
		LastSynced time.Time
	}
	var err2 error
	s.Stats, err2 = q.Stats()
	if err2 != nil {
		t.Fatal(err2)
	}
	s.Stats.Path, s.Stats.FileSize = "", 0
	s.Keys = map[string]queue.Entry{}
	for i := 1; i <= fixtureMovements; i++ {
		id := fmt.Sprintf("M%06d", i)
		if e, err := q.Get(movement.Key(storeID, id)); err == nil {
			s.Keys[id] = e
		}
	}
	last, err := q.LastSeq()
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for i := uint64(1); i <= last; i++ {
		seqs = append(seqs, i)
	}
	if s.Lookup, err = q.LookupSeqs(seqs); err != nil {
		t.Fatal(err)
	}
	s.Lookup.Scanned = 0
	err = q.Events(time.Time{}, func(ev queue.Event) bool {
		// Start entries come between; a file of schema 2 kept no log, and
		// the first open that finds none starts one (its id is random).
		if ev.Action != queue.ActionStart && ev.Action != queue.ActionLedger {
			ev.Seq = 0
			s.Events = append(s.Events, ev)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Lineage = q.Lineage()
	if s.LastSynced, err = q.LastSyncedAt(); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
