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
// empty), its digest from the key and variant, enqueued at at.
func archiveMsg(store string, seq uint64, id, variant string, at time.Time) *nats.Msg {
	if id == "" {
		id = strconv.FormatUint(seq, 10)
	}
	k := sha256.Sum256([]byte(store + "\x00" + id))
	key := hex.EncodeToString(k[:16])
	d := sha256.Sum256(append(k[:], variant...))
	digest := hex.EncodeToString(d[:])
	m := nats.NewMsg(central.ArchiveSubject(store))
	m.Header.Set(central.HeaderMsgID, central.MsgID(key, digest))
	m.Header.Set(central.HeaderDigest, digest)
	m.Header.Set(central.HeaderStore, store)
	m.Header.Set(central.HeaderSeq, strconv.FormatUint(seq, 10))
	m.Header.Set(central.HeaderEnqueuedAt, at.UTC().Format(time.RFC3339Nano))
	return m
}
