package reconcile_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/reconcile"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestReadThroughput reads an archive of RXEDGE_RECONCILE_RECORDS records
// (default 5,000, 1,000 with -short; 1000000 for the figure in the
// README) spread over 200 stores, with nothing missing, and logs the
// records read per second. The records are published straight into an
// archive that takes rx.ar.> itself instead of sourcing it from the
// movement stream: what is measured is the read, and sourcing a million
// messages would only make the test slower.
func TestReadThroughput(t *testing.T) {
	n := 5_000
	if v := os.Getenv("RXEDGE_RECONCILE_RECORDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	} else if testing.Short() {
		n = 1_000
	}
	const stores = 200
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cfg := central.ArchiveConfig(central.StreamOptions{})
	cfg.Sources, cfg.Subjects = nil, []string{central.ArchivePrefix + ">"}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, central.FleetStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 300)
	start := time.Now()
	for i := range n {
		store := fmt.Sprintf("S%04d", i%stores)
		m := archiveMsg(store, uint64(i/stores+1), "", "", time.Now())
		m.Data = payload
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
		if i%2000 == 1999 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("publishing the archive: not acknowledged in time")
			}
		}
	}
	t.Logf("published %d archive records in %v", n, time.Since(start).Round(time.Millisecond))

	rep, err := reconcile.Run(ctx, reconcile.Options{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != uint64(n) || rep.Total.Held != uint64(n) || rep.Total.Missing != 0 || !rep.OK() || len(rep.Stores) != stores {
		t.Errorf("read %d records, %d held, %d missing, ok %v, %d stores; want %d, %d, 0, true, %d", rep.Records, rep.Total.Held, rep.Total.Missing, rep.OK(), len(rep.Stores), n, n, stores)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	t.Logf("reconcile read %d archive records of %d stores in %.2fs: %.0f records/s (GOMAXPROCS %d, process heap after a GC, embedded server included, %s; filter %s)",
		rep.Records, stores, rep.ReadSeconds, rep.RecordsPerSecond, runtime.GOMAXPROCS(0), mib(ms.HeapInuse), mib(rep.FilterBytes))
	if rep.RereadStores > 0 {
		t.Logf("then read again %d records of %d stores in %.2fs: %.0f records/s (filter false positives)",
			rep.RereadRecords, rep.RereadStores, rep.RereadSeconds, float64(rep.RereadRecords)/rep.RereadSeconds)
	}
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// archiveMsg is an archived movement of store with sequence seq: its key
// derived from the store and the movement id (the sequence when id is
// empty), its digest from the key and variant, enqueued at at. Even
// sequences are in the full form (an agent before the compact headers),
// odd ones in the compact form, so every test reads an archive of both.
func archiveMsg(store string, seq uint64, id, variant string, at time.Time) *nats.Msg {
	if id == "" {
		id = strconv.FormatUint(seq, 10)
	}
	k := sha256.Sum256([]byte(store + "\x00" + id))
	d := sha256.Sum256(append(k[:], variant...))
	mv := central.Message{Store: store, Key: hex.EncodeToString(k[:16]), Digest: hex.EncodeToString(d[:]), Seq: seq, EnqueuedAt: at}
	m := mv.Msg()
	if seq%2 == 0 {
		m = natstest.FullForm(mv, "")
	}
	m.Subject = central.ArchiveSubject(store)
	m.Header.Del(central.HeaderExpectLast)
	return m
}

// lineageMsg is archiveMsg of a movement of data file file, which
// continues after file prev past base when origin is set; lineage asks
// for the lineage headers past the file's first central.LineageSpan
// sequences (an atomic batch's first message). full sends the full form,
// which carries the lineage on every movement of the file.
func lineageMsg(store string, seq uint64, file, prev string, base uint64, origin string, lineage, full bool) *nats.Msg {
	k := sha256.Sum256([]byte(store + "\x00" + strconv.FormatUint(seq, 10)))
	d := sha256.Sum256(k[:])
	mv := central.Message{Store: store, Key: hex.EncodeToString(k[:16]), Digest: hex.EncodeToString(d[:]), Seq: seq, EnqueuedAt: time.Now(),
		File: central.FileLineage{ID: file, Prev: prev, Base: base, Origin: origin}, Lineage: lineage}
	m := mv.Msg()
	if full {
		m = natstest.FullForm(mv, "")
	}
	m.Subject = central.ArchiveSubject(store)
	m.Header.Del(central.HeaderExpectLast)
	return m
}

// TestRunFileLineageFromSomeMovements: the compact form carries a
// continued file's lineage on its first central.LineageSpan sequences and
// on each atomic batch's first message only. The reconciliation takes a
// file's lineage from whichever of its movements has it, and finds the
// same change of file as from the full form, which has it on every one:
// S0001's new file is archived from its first sequence on, S0002's only
// past the span (its first movements never reached central), S0003 is an
// agent of the version before.
func TestRunFileLineageFromSomeMovements(t *testing.T) {
	r := newRig(t, map[string][]string{central.ArchiveStreamName: {"S0001", "S0002", "S0003"}})
	const base = 8 // the old file gave 1..8; central has 1..5
	span := uint64(central.LineageSpan)
	for _, store := range []string{"S0001", "S0002", "S0003"} {
		full := store == "S0003"
		for seq := uint64(1); seq <= 5; seq++ {
			r.put(lineageMsg(store, seq, "file-a", "", 0, "", false, full))
		}
		var seqs []uint64
		switch store {
		case "S0002":
			seqs = []uint64{base + span + 1, base + span + 2}
		default:
			seqs = []uint64{base + 1, base + 2, base + span + 1, base + span + 2}
		}
		for i, seq := range seqs {
			m := lineageMsg(store, seq, "file-b", "file-a", base, reconcile.FileReplaced, store == "S0002" && i == 0, full)
			if _, carries := m.Header[central.HeaderFileOrigin]; carries != (seq <= base+span || full || store == "S0002" && i == 0) {
				t.Fatalf("%s sequence %d: lineage headers %v", store, seq, m.Header)
			}
			r.put(m)
		}
		r.fleet(store, base+span+2)
	}
	rep, err := reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc})
	if err != nil {
		t.Fatal(err)
	}
	for _, store := range []string{"S0001", "S0002", "S0003"} {
		s := storeOf(t, rep, store)
		if len(s.Files) != 1 {
			t.Fatalf("%s: file findings %+v, want one", store, s.Files)
		}
		f := s.Files[0]
		if f.Origin != reconcile.FileReplaced || f.Prev != "file-a" || f.File != "file-b" || f.Base != base || f.PrevHighest != 5 ||
			f.Lost == nil || *f.Lost != (reconcile.Range{From: 6, To: base}) {
			t.Errorf("%s: finding %+v (lost %v), want file-a replaced by file-b past %d, 5 archived, 6..%d lost", store, f, f.Lost, base, base)
		}
		if s.Malformed != 0 {
			t.Errorf("%s: %d malformed", store, s.Malformed)
		}
	}
}
