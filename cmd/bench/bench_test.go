package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// tinyBench is a bench with sizes small enough for a unit test.
func tinyBench(t *testing.T) (*bench, *bytes.Buffer) {
	t.Helper()
	s := quickSizes()
	s.ingestN, s.naiveN, s.ingestConns = 400, 50, 16
	s.ingestRounds = 2
	s.syncN, s.syncRounds = 600, 2
	var log bytes.Buffer
	b := &bench{size: s, root: t.TempDir(), log: &log, rep: newReport(), now: time.Now(), backlogs: make(map[string]string)}
	b.rep.mode = "test"
	return b, &log
}

func TestGeneratedMovementsAreValid(t *testing.T) {
	now := time.Now()
	for _, i := range []int{0, 1, 4, 5, 9, 10, 99, 12345, 999_999} {
		g := generate("S0001", i, now)
		p, es := movement.Prepare(g.Payload, "S0001", now)
		if es != nil {
			t.Fatalf("movement %d: %v\n%s", i, es, g.Payload)
		}
		if string(p.Payload) != string(g.Payload) || p.Key != g.Key || p.Digest != g.Digest || p.Class != g.Class || p.Schedule != g.Schedule || p.MovementID != g.MovementID {
			t.Errorf("movement %d: generated %+v, Prepare gives %+v", i, g, p)
		}
		if len(g.Payload) != payloadSize {
			t.Errorf("movement %d: payload is %d bytes, want %d", i, len(g.Payload), payloadSize)
		}
	}
}

// TestIngestAndSyncScenarios runs the ingest and sync scenarios at a tiny
// size: every part runs against real files, a real HTTP listener and real
// hubs, and every figure they promise comes out.
func TestIngestAndSyncScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("starts hubs and an agent")
	}
	b, log := tinyBench(t)
	ctx := context.Background()
	if err := benchIngest(ctx, b); err != nil {
		t.Fatalf("ingest: %v\n%s", err, log)
	}
	if err := benchSync(ctx, b); err != nil {
		t.Fatalf("sync: %v\n%s", err, log)
	}
	got := b.rep.json()
	for _, name := range []string{"ingest_vs_naive", "ingest_http_p50_ms", "ingest_http_p99_ms", "trickle_vs_raw_durable", "backlog_drain_vs_raw_durable", "sync_drain_nosync_rate",
		"ingest_vs_http_batch", "ingest_http_batch_p99_ms", "decode_ns", "decode_allocs", "decode_vs_unmarshal"} {
		if v, ok := got.Figures[name]; !ok || !(v > 0) {
			t.Errorf("figure %s = %v (present %v), want a positive number", name, v, ok)
		}
	}
	var md bytes.Buffer
	b.rep.writeMarkdown(&md)
	if !strings.Contains(md.String(), "`ingest_vs_naive`") || !strings.Contains(md.String(), "| scenario | figure | baseline | ratio | target | met? |") {
		t.Errorf("the Markdown report lacks the table or a figure:\n%s", md.String())
	}
	t.Logf("\n%s", md.String())
}

func TestBinTimes(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	// Bins run from the first time (5 ms before start) to the last.
	times := []time.Time{at(-5), at(10), at(20), at(150), at(390), at(399)}
	r := binTimes(times, start, 100*time.Millisecond)
	want := []int{3, 1, 0, 1, 1}
	if len(r.bins) != len(want) {
		t.Fatalf("bins %v, want %v", r.bins, want)
	}
	for i := range want {
		if r.bins[i] != want[i] {
			t.Fatalf("bins %v, want %v", r.bins, want)
		}
	}
	if r.peak != 3 || r.mean != 1.2 || r.peakToMean != 2.5 {
		t.Errorf("peak %d mean %v peak/mean %v, want 3, 1.2, 2.5", r.peak, r.mean, r.peakToMean)
	}
	if r.first != 0 || r.window != 399*time.Millisecond {
		t.Errorf("first %s window %s, want 0 and 399ms", r.first, r.window)
	}
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"-only", "ingest,nope"}, {"extra"}, {"-bogus"}, {"-central-keys", "5"}} {
		err := run(context.Background(), args, &out, &errb)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("run %q: %v, want a usage error", args, err)
		}
	}
}

func TestQuickRunMarksMillionFiguresNotMeasured(t *testing.T) {
	r := newReport()
	r.mode = "quick"
	r.missing("3 scale", "backlog_1m_heap_mib", "heap", atMost(64), "quick run")
	r.value("3 scale", "backlog_100k_heap_mib", "heap", 12, "MiB", nil)
	j := r.json()
	if _, ok := j.Figures["backlog_1m_heap_mib"]; ok {
		t.Error("a figure not measured has a value in the JSON")
	}
	if j.NotMeasured["backlog_1m_heap_mib"] == "" || j.Targets["backlog_1m_heap_mib"].Met != nil {
		t.Errorf("not_measured %v, target %+v", j.NotMeasured, j.Targets["backlog_1m_heap_mib"])
	}
	var md bytes.Buffer
	r.writeMarkdown(&md)
	if !strings.Contains(md.String(), "Quick run") || !strings.Contains(md.String(), "not measured") {
		t.Errorf("report:\n%s", md.String())
	}
}

// TestPendingRecordPutsMatchQueue pins the raw bulk baseline to the
// queue's record layout: what pendingRecordPuts writes for a movement is
// byte for byte what queue.Enqueue wrote for it, its key entry being the
// one the queue's key index holds in the key's group (queue/keyindex.go:
// the baseline keeps an entry per key, the plain bbolt shape). When the
// queue's layout changes, this fails until pendingRecordPuts follows.
func TestPendingRecordPutsMatchQueue(t *testing.T) {
	now := time.Unix(1_800_000_000, 123456789)
	path := filepath.Join(t.TempDir(), "agent.db")
	q, err := queue.Open(queue.Options{Path: path, StoreID: "S0001", Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	items := []movement.Prepared{generate("S0001", 5, now), generate("S0001", 6, now)}
	res, err := q.Enqueue(items)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for i := range items {
			for _, p := range pendingRecordPuts(&items[i], res[i].Seq, now) {
				if bytes.Equal(p.bucket, rawBucketKeys) {
					if got := groupedEntry(tx.Bucket([]byte("key_groups")), p.key); !bytes.Equal(got, p.value) {
						t.Errorf("movement %d: key entry %x, the queue's %x", i, p.value, got)
					}
					continue
				}
				bk := tx.Bucket(p.bucket)
				if bk == nil {
					t.Errorf("the queue has no bucket %q", p.bucket)
					continue
				}
				got := bk.Get(p.key)
				if got == nil && !keyIn(bk, p.key) {
					t.Errorf("movement %d: bucket %q has no key %x", i, p.bucket, p.key)
					continue
				}
				if !bytes.Equal(got, p.value) {
					t.Errorf("movement %d: bucket %q key %x:\n got  %x\n want %x (the queue's)", i, p.bucket, p.key, p.value, got)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// groupedEntry finds key's entry in the queue's key index, whose group
// values are members of key (16), entry length (uvarint) and entry.
func groupedEntry(groups *bolt.Bucket, key []byte) []byte {
	if groups == nil {
		return nil
	}
	var found []byte
	groups.ForEach(func(_, v []byte) error {
		for len(v) > 16 {
			n, w := binary.Uvarint(v[16:])
			if w <= 0 || int(n) > len(v)-16-w {
				return nil
			}
			if bytes.Equal(v[:16], key) {
				found = v[16+w : 16+w+int(n)]
			}
			v = v[16+w+int(n):]
		}
		return nil
	})
	return found
}

func keyIn(b *bolt.Bucket, k []byte) bool {
	got, _ := b.Cursor().Seek(k)
	return bytes.Equal(got, k)
}

// TestDrainAndBulkScenarios runs the drain and bulk scenarios at a tiny
// size against real hubs, data files and the built agent binary, and
// checks that every figure they promise comes out: at sizes other than a
// million, the million figures are reported as not measured.
func TestDrainAndBulkScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("starts hubs and builds the agent")
	}
	b, log := tinyBench(t)
	b.size.drainN, b.size.drainRounds, b.size.bytesN = 3000, 2, 4000
	b.size.bulkN, b.size.bulkRounds = 2000, 2
	ctx := context.Background()
	if err := benchDrain(ctx, b); err != nil {
		t.Fatalf("drain: %v\n%s", err, log)
	}
	if err := benchBulk(ctx, b); err != nil {
		t.Fatalf("bulk: %v\n%s", err, log)
	}
	got := b.rep.json()
	for _, name := range []string{"drain_random_vs_raw_atomic_3k", "drain_sorted_vs_raw_atomic_3k", "drain_random_vs_sorted_3k",
		"bytes_per_pending_vs_payload_4k", "bytes_per_synced_key_4k", "bulk_enqueue_vs_raw_bulk_2k"} {
		if v, ok := got.Figures[name]; !ok || !(v > 0) {
			t.Errorf("figure %s = %v (present %v), want a positive number", name, v, ok)
		}
	}
	for _, name := range []string{"drain_random_vs_raw_atomic", "drain_sorted_vs_raw_atomic", "bytes_per_pending_vs_payload", "bytes_per_synced_key", "bulk_enqueue_vs_raw_bulk"} {
		if got.NotMeasured[name] == "" {
			t.Errorf("figure %s is not reported as not measured at these sizes", name)
		}
	}
	if v := got.Figures["bytes_per_pending_vs_payload_4k"]; v < 1 {
		t.Errorf("bytes per pending movement / payload = %v: a file cannot hold a payload in less than its size", v)
	}
}
