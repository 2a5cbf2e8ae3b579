package queue

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

// The fixtures testdata/v2.db.gz and testdata/v3.db.gz are data files
// written by the queue of schema 2 and of schema 3, and testdata/v2.json.gz
// and v3.json.gz what that queue's API said of each (testdata/fixturegen
// made them; dumpState is its dump function).

// fixtures are the older schemas' fixtures.
var fixtures = []string{"v2", "v3"}

func gunzip(t testing.TB, path string) []byte {
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

// fixtureFile writes the fixture of name at a new path and returns it.
func fixtureFile(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.db")
	if err := os.WriteFile(path, gunzip(t, filepath.Join("testdata", name+".db.gz")), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fixtureIDs are the movement ids the fixtures' generator submitted.
func fixtureIDs() []string {
	var ids []string
	for i := 1; i <= 2190; i++ {
		ids = append(ids, fmt.Sprintf("M%06d", i))
	}
	return ids
}

// dumpedState is what the public API says of a data file.
type dumpedState struct {
	Stats struct {
		Counts           map[string]map[string]uint64
		SyncedTotal      uint64
		QuarantinedTotal uint64
		OldestPending    time.Time
		NextSeq          uint64
	}
	Keys        map[string]dumpedKey
	Lookup      Lookup
	Events      []Event
	Lineage     Lineage
	LastSynced  time.Time
	Quarantined []*Record
	Resubmit    map[string][2]string // id → answer to the same content, to other content
}

type dumpedKey struct {
	Err   string `json:",omitempty"`
	Entry Entry
}

// dumpState is testdata/fixturegen's dump: keep both alike. Its last part
// submits movements again, which adds the ones whose key was pruned.
func dumpState(t testing.TB, q *Queue, ids []string) dumpedState {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var s dumpedState
	st, err := q.Stats()
	must(err)
	s.Stats.Counts = map[string]map[string]uint64{}
	for state, m := range st.Counts {
		s.Stats.Counts[state.String()] = map[string]uint64{}
		for c, n := range m {
			s.Stats.Counts[state.String()][c.String()] = n
		}
	}
	s.Stats.SyncedTotal, s.Stats.QuarantinedTotal = st.SyncedTotal, st.QuarantinedTotal
	s.Stats.OldestPending, s.Stats.NextSeq = st.OldestPending, st.NextSeq
	s.Keys = map[string]dumpedKey{}
	s.Resubmit = map[string][2]string{}
	for _, id := range ids {
		e, err := q.Get(movement.Key("S0042", id))
		ks := dumpedKey{Entry: e}
		if err != nil {
			ks = dumpedKey{Err: err.Error()}
		}
		s.Keys[id] = ks
	}
	last, err := q.LastSeq()
	must(err)
	var seqs []uint64
	for i := uint64(0); i <= last+2; i++ {
		seqs = append(seqs, i)
	}
	s.Lookup, err = q.LookupSeqs(seqs)
	must(err)
	s.Lookup.Scanned = 0
	must(q.Events(time.Time{}, func(ev Event) bool {
		s.Events = append(s.Events, ev)
		return true
	}))
	s.Lineage = q.Lineage()
	s.LastSynced, err = q.LastSyncedAt()
	must(err)
	must(q.ForEachQuarantined(func(r *Record) bool {
		s.Quarantined = append(s.Quarantined, r)
		return true
	}))
	// Every fifth movement again, with the same content, then with other
	// content: the answers schema 2's generator got one submission at a
	// time, from two submissions (the position in the submission aside,
	// which is set as it was).
	var resub []string
	var items [2][]movement.Prepared
	for i, id := range ids {
		if i%5 != 0 {
			continue
		}
		sched := ""
		if (i+1)%7 == 0 {
			sched = `,"schedule":"CII"`
		}
		resub = append(resub, id)
		for v := 0; v < 2; v++ {
			js := fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":%d,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"%s}`, id, v+1, sched)
			p, es := movement.Prepare([]byte(js), "S0042", time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			if es != nil {
				t.Fatal(es)
			}
			items[v] = append(items[v], p)
		}
	}
	var ans [2][]string
	for v := 0; v < 2; v++ {
		res, err := q.EnqueueEach(items[v])
		must(err)
		for _, r := range res {
			a := fmt.Sprintf("seq=%d dup=%v", r.Seq, r.Duplicate)
			var ce *ConflictError
			var pe *PurgedError
			switch {
			case errors.As(r.Err, &ce):
				ce.Index = 0
				a = ce.Error()
			case errors.As(r.Err, &pe):
				pe.Index = 0
				a = pe.Error()
			case r.Err != nil:
				a = r.Err.Error()
			}
			ans[v] = append(ans[v], a)
		}
	}
	for i, id := range resub {
		s.Resubmit[id] = [2]string{ans[0][i], ans[1][i]}
	}
	return s
}

// canonicalJSON encodes v with every time in UTC, so that dumps made
// in different time zones compare equal.
func canonicalJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var x any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&x); err != nil {
		t.Fatal(err)
	}
	var walk func(any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				v[k] = walk(e)
			}
		case []any:
			for i, e := range v {
				v[i] = walk(e)
			}
		case string:
			if tm, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return tm.UTC().Format(time.RFC3339Nano)
			}
		}
		return v
	}
	out, err := json.MarshalIndent(walk(x), "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// fixtureWant is each fixture's record, canonical, once read.
var fixtureWant sync.Map

// sameDump compares a dump with the record of the fixture name and
// reports the first lines that differ.
func sameDump(t testing.TB, name string, got dumpedState) {
	t.Helper()
	if _, ok := fixtureWant.Load(name); !ok {
		var want dumpedState
		if err := json.Unmarshal(gunzip(t, filepath.Join("testdata", name+".json.gz")), &want); err != nil {
			t.Fatal(err)
		}
		fixtureWant.Store(name, canonicalJSON(t, want))
	}
	w0, _ := fixtureWant.Load(name)
	if !strings.Contains(w0.(string), `"action": "`+string(ActionLedger)+`"`) {
		// Schema 2 kept no log: the first open of such a file starts one
		// and journals it (see ledger.go), which schema 2 could not say.
		got.Events = slices.DeleteFunc(got.Events, func(ev Event) bool { return ev.Action == ActionLedger })
	}
	g, w := canonicalJSON(t, got), w0.(string)
	if g == w {
		return
	}
	gl, wl := strings.Split(g, "\n"), strings.Split(w, "\n")
	for i := 0; i < min(len(gl), len(wl)); i++ {
		if gl[i] != wl[i] {
			t.Fatalf("the migrated file differs from what the older schema said of it at line %d:\ngot  %s\nwant %s\n(context: %s)", i+1, gl[i], wl[i], strings.Join(wl[max(0, i-12):i], "\n"))
		}
	}
	t.Fatalf("the migrated file's dump has %d lines, the older schema's %d", len(gl), len(wl))
}

// TestMigrate opens the files written by schemas 2 and 3: once upgraded
// each passes Verify, is at the current schema, has no older bucket or
// marker left, and says through every read (states, sequences, stream
// sequences, times, records with their failure history, counters,
// journal, lineage, answers to submissions) exactly what the older
// schema said.
func TestMigrate(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			path := fixtureFile(t, name)
			var calls, last, total int64
			q, err := Open(Options{Path: path, StoreID: "S0042", MigrateProgress: func(done, all int64) {
				calls++
				last, total = done, all
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			verify(t, q)
			if calls < 2 || last != total || total == 0 {
				t.Errorf("progress: %d calls, last %d of %d", calls, last, total)
			}
			s, _ := q.Stats()
			if s.SchemaVersion != SchemaVersion {
				t.Errorf("schema %d after the upgrade, want %d", s.SchemaVersion, SchemaVersion)
			}
			q.db.View(func(tx *bolt.Tx) error {
				meta := tx.Bucket(bucketMeta)
				if tx.Bucket(bucketSyncedAtV2) != nil || tx.Bucket(bucketSyncedV3) != nil || layoutMigrating(meta) {
					t.Error("an older bucket or an upgrade marker is left")
				}
				if n := tx.Bucket(bucketSynced).Stats().KeyN; n == 0 || n > 1366/syncedBlockLen+2 {
					t.Errorf("1,366 synced movements in %d blocks", n)
				}
				if tx.Bucket(bucketKeysV3) != nil {
					t.Error("schema 3's keys bucket is left")
				}
				return buckets(tx).keys.ForEach(func(k, v []byte) error {
					if v[0] != entryShort && v[0] != entryLong {
						t.Fatalf("key %x left in the schema 2 form", k)
					}
					return nil
				})
			})
			sameDump(t, name, dumpState(t, q, fixtureIDs()))
		})
	}
}

var errStopped = errors.New("stopped after a chunk")

// TestMigrateResumes stops the upgrade of the schema 2 file after its
// first chunk, after a middle one of the keys phase (100 keys a chunk,
// about 20 chunks) and after one of the packing phase that follows (100
// synced entries a chunk), and that of the schema 3 file, which has only
// the packing phase, after its first and a middle chunk, as a crash
// between two transactions would, and checks
// that an older agent would refuse the file then, that read-only opens
// refuse it with a clear error, and that the next open finishes it with
// the same result as an upgrade in one go.
func TestMigrateResumes(t *testing.T) {
	chunk, after := migrateChunk, migrateAfterChunk
	t.Cleanup(func() { migrateChunk, migrateAfterChunk = chunk, after })
	migrateChunk = 100
	for _, c := range []struct {
		name       string
		stop, keys int // the chunk stopped after, the keys phase's chunks
	}{{"v2", 1, 20}, {"v2", 12, 20}, {"v2", 26, 20}, {"v3", 1, 0}, {"v3", 7, 0}} {
		stop := c.stop
		t.Run(fmt.Sprintf("%s/%d", c.name, stop), func(t *testing.T) {
			path := fixtureFile(t, c.name)
			migrateAfterChunk = func(n int) error {
				if n == stop {
					return errStopped
				}
				return nil
			}
			if _, err := Open(Options{Path: path, StoreID: "S0042"}); !errors.Is(err, errStopped) {
				t.Fatalf("Open stopped after chunk %d: %v", stop, err)
			}
			migrateAfterChunk = nil
			db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			var schema uint64
			var marker []byte
			var repacking, packed bool
			db.View(func(tx *bolt.Tx) error {
				meta := tx.Bucket(bucketMeta)
				schema = getU64(meta, metaSchema)
				marker = bytes.Clone(meta.Get(metaMigrating))
				repacking = meta.Get(metaRepacking) != nil
				packed = tx.Bucket(bucketSynced).Stats().KeyN > 0
				return nil
			})
			db.Close()
			inKeys := stop < c.keys
			if schema != SchemaVersion || !repacking || inKeys != (len(marker) == 16) || inKeys == packed {
				t.Fatalf("stopped upgrade: schema %d (older agents must refuse it), keys marker %x, repacking %v, blocks written %v", schema, marker, repacking, packed)
			}
			if _, err := Open(Options{Path: path, ReadOnly: true}); err == nil || !errors.Is(err, ErrOldLayout) {
				t.Fatalf("read-only open of a file whose upgrade stopped: %v", err)
			}
			q, err := Open(Options{Path: path, StoreID: "S0042"})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			verify(t, q)
			sameDump(t, c.name, dumpState(t, q, fixtureIDs()))
		})
	}
}

// TestCompactUpgradesFirst compacts the files of schemas 2 and 3: the
// compaction upgrades each first, and the compacted file says what the
// older schema said.
func TestCompactUpgradesFirst(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) { compactUpgradesFirst(t, name) })
	}
}

func compactUpgradesFirst(t *testing.T, name string) {
	path := fixtureFile(t, name)
	if _, err := Compact(path, CompactOptions{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	q, err := Open(Options{Path: path, StoreID: "S0042"})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	verify(t, q)
	d := dumpState(t, q, fixtureIDs())
	// The compaction journalled itself.
	if n := len(d.Events); n == 0 || d.Events[n-1].Action != ActionCompact {
		t.Fatalf("last event %+v, want the compaction", d.Events[len(d.Events)-1])
	}
	d.Events = d.Events[:len(d.Events)-1]
	sameDump(t, name, d)
}
