package audit_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// What a store's credentials can publish on its own subjects: garbage
// under a checkpoint id, a movement with no usable headers, a checkpoint
// whose id names another size. Each is a finding (the first three
// unverified checkpoints, the last two altered records); nothing else
// changes.
func TestVerifyRefusesGarbage(t *testing.T) {
	r := newRig(t)
	pub := func(id string, data []byte, seq string) {
		t.Helper()
		subj := ledgertest.Key("S0042", 1000+int(r.records))
		if ledger.IsCheckpointToken(id) {
			subj = id
		}
		m := nats.NewMsg(central.Subject("S0042", subj))
		m.Header.Set(central.HeaderMsgID, id)
		m.Header.Set(central.HeaderStore, "S0042")
		if seq != "" {
			m.Header.Set(central.HeaderSeq, seq)
		}
		m.Data = data
		if _, err := r.js.PublishMsg(r.ctx, m); err != nil {
			t.Fatal(err)
		}
		r.records++
	}
	pub(ledger.CheckpointToken(r.a.Log, 99), []byte(`{"note":`), "")
	pub(ledger.CheckpointToken(r.a.Log, 98), []byte(strings.Repeat("x", ledger.MaxMessage+1)), "")
	pub("cp-nonsense", []byte(`{}`), "")
	pub(ledgertest.Key("S0042", 999), []byte(`{}`), "x")
	// A genuine checkpoint message republished under another size's id.
	r.a.Movements(r.ctx, t, r.js, 1)
	body, _ := r.a.Checkpoint(r.ctx, t, r.js).Marshal()
	r.records += 2
	pub(ledger.CheckpointToken(r.a.Log, 62), body, "")
	r.wait(t)
	rep := r.verify(t)
	if rep.Counts[audit.KindUnverifiedCheckpoint] != 3 || rep.Counts[audit.KindAltered] != 2 || len(failing(rep)) != 5 {
		t.Fatalf("want 3 unverified checkpoints and 2 altered records:\n%s", dump(rep))
	}
	for _, l := range rep.Logs {
		if l.Store == "S0042" && l.Matched != 61 {
			t.Errorf("the genuine log no longer matches: %+v", l)
		}
	}
}

// An archive rewritten with unsigned checkpoint records of a log before
// and after its genuine ones: the log is learned from its signed
// checkpoints all the same, and checked whole, whether the store is asked
// or not; the records are counted, the first few listed.
func TestVerifyStuffedCheckpoints(t *testing.T) {
	r := newRig(t)
	junk := func(size int64) ledgertest.Record {
		h := nats.Header{}
		h.Set(central.HeaderMsgID, ledger.CheckpointToken(r.a.Log, size))
		return ledgertest.Record{Subject: central.ArchiveSubject("S0042"), Header: h, Data: []byte(`{"note":"x"}`)}
	}
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		var out []ledgertest.Record
		for i := 0; i < 20; i++ {
			out = append(out, junk(int64(100+i)))
		}
		out = append(out, recs...)
		for i := 0; i < 20; i++ {
			out = append(out, junk(int64(200+i)))
		}
		return out
	})
	for _, asked := range []bool{true, false} {
		rep := r.verify(t, func(o *audit.Options) {
			if !asked {
				o.Asker = nil
			}
		})
		// Eight listed one by one, the other 32 in one finding.
		got := failing(rep)
		if rep.OK() || rep.Counts[audit.KindUnverifiedCheckpoint] != 40 || len(got) != 9 || got[8].Count != 32 {
			t.Fatalf("stuffed archive, asked %v: %s", asked, dump(rep))
		}
		for _, l := range rep.Logs {
			if l.Store == "S0042" && (l.Matched != 60 || l.Leaves != 60 || l.Checkpoints != 4) {
				t.Errorf("asked %v: log %+v not checked", asked, l)
			}
		}
	}
}

// One record under a checkpoint token of a huge size, unsigned, published
// on a store's subjects by a user of the streams' account, and another
// signed by another store's key at a larger size still: prove takes the
// newest checkpoint a roster key of the store signed, and without the
// roster it writes nothing.
func TestProveDespiteForgedCheckpoint(t *testing.T) {
	r := newRig(t)
	ledgertest.PublishUnsigned(r.ctx, t, r.js, "S0042", 1, func(int) (string, int64) { return r.a.Log, 1 << 40 })
	ledgertest.PublishForged(r.ctx, t, r.js, r.b.Signer, "S0042", r.a.Log, 1<<41)
	r.records += 2
	r.wait(t)
	key := ledgertest.Key("S0042", 32) // sequence 33
	for _, store := range []string{"", "S0042"} {
		p, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: key, Store: store, Roster: r.roster, NoWitness: true})
		if err != nil {
			t.Fatalf("prove (--store %q) with forged checkpoints in the archive: %v", store, err)
		}
		res, err := ledger.CheckProof(p, r.a.VKey, "")
		if err != nil || res.Leaf.Seq != 33 || res.Checkpoint.Size != 60 {
			t.Fatalf("proof (--store %q): %+v %v, want sequence 33 in the checkpoint of size 60", store, res, err)
		}
	}
	if p, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: key, Store: "S0042", NoWitness: true}); !errors.Is(err, audit.ErrNoRoster) {
		t.Fatalf("prove without the roster: %v; wrote a proof whose checkpoint no one authenticated:\n%s", err, p.Checkpoint)
	}
	keyless, err := provision.ParseRoster(strings.NewReader("S0042\n" + r.b.RosterLine()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: key, Roster: keyless, NoWitness: true}); !errors.Is(err, audit.ErrNoRoster) {
		t.Fatalf("prove with no key of the store in the roster: %v", err)
	}
}

// A roster that gives a store no key: none of its checkpoints is
// authenticated, each is counted, and the report says why.
func TestVerifyKeylessStore(t *testing.T) {
	r := newRig(t)
	keyless, err := provision.ParseRoster(strings.NewReader("S0042\n" + r.b.RosterLine()))
	if err != nil {
		t.Fatal(err)
	}
	rep := r.verify(t, func(o *audit.Options) { o.Roster = keyless })
	if rep.OK() || rep.Counts[audit.KindUnverifiedCheckpoint] != 4 || len(rep.Logs) != 1 || rep.Checkpoints != 1 ||
		!strings.Contains(strings.Join(rep.Notes, "\n"), "store S0042 has no key in the roster: none of its checkpoints could be authenticated") {
		t.Fatalf("S0042 without a key: %+v\n%s", rep.Logs, dump(rep))
	}
}

// An archive rewritten with one movement's payload changed (its digest
// recomputed), then stuffed with thousands of unsigned records under the
// log's checkpoint tokens, of sizes above the genuine ones: the change is
// still found, and the records are counted.
func TestVerifyStuffingHidesNoAlteration(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		for i := range recs {
			if recs[i].Subject == central.ArchiveSubject("S0042") && recs[i].Seq() == 27 {
				recs[i].SetPayload(bytes.Replace(recs[i].Data, []byte(`"qty":27`), []byte(`"qty":2`), 1))
			}
		}
		return recs
	})
	stuffed := 10_000
	if raceEnabled {
		stuffed = 2_000 // still far more than the 20 findings listed
	}
	ledgertest.PublishUnsigned(r.ctx, t, r.js, "S0042", stuffed, func(i int) (string, int64) { return r.a.Log, int64(1000 + i) })
	r.records += uint64(stuffed)
	r.wait(t)
	for _, asked := range []bool{false, true} {
		rep := r.verify(t, func(o *audit.Options) {
			if !asked {
				o.Asker = nil
			}
		})
		from, to := uint64(21), uint64(40) // between the checkpoints of sizes 20 and 40
		if asked {
			from, to = 27, 27
		}
		found := false
		for _, f := range rep.Findings {
			found = found || f.Kind == audit.KindAltered && f.Store == "S0042" && f.From == from && f.To == to
		}
		if rep.OK() || !found || rep.Counts[audit.KindAltered] != 1 {
			t.Errorf("asked %v: the altered movement is not reported (sequences %d-%d):\n%s", asked, from, to, dump(rep))
		}
		if n := rep.Counts[audit.KindUnverifiedCheckpoint]; n != stuffed {
			t.Errorf("asked %v: %d unverified checkpoint records counted, want %d", asked, n, stuffed)
		}
		if len(rep.Findings) > 20 {
			t.Errorf("asked %v: %d findings listed: the stuffing is listed record by record", asked, len(rep.Findings))
		}
		for _, l := range rep.Logs {
			if l.Store == "S0042" && (l.Latest != 60 || l.Checkpoints != 4) {
				t.Errorf("asked %v: log %+v: want its 4 signed checkpoints, the latest of size 60", asked, l)
			}
		}
	}
}

// The memory verify spends on records under checkpoint tokens that no
// roster key signed does not grow with their number: the live heap at the
// end of verify's read (the verifier's whole state), against a
// nats-server in a process of its own, with none, 10,000 and 100,000
// such records, half of them under the store's log and sizes above its
// own, half each under a log id of its own.
func TestVerifyMemoryUnderForgedCheckpoints(t *testing.T) {
	url := startHubProcess(t)
	r := newRigAt(t, url)
	forge := func(i int) (string, int64) {
		if i%2 == 0 {
			return r.a.Log, int64(1000 + i)
		}
		return fmt.Sprintf("%016x", i), int64(i)
	}
	type point struct {
		forged            int
		live, peak, alloc uint64
		secs              float64
	}
	measure := func(forged int) point {
		t.Helper()
		var live uint64
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		stop := samplePeakHeap()
		t0 := time.Now()
		rep := r.verify(t, func(o *audit.Options) {
			o.Asker = nil
			o.Progress = func(read string, done, total uint64) {
				if read == audit.ReadArchive && done == total {
					var ms runtime.MemStats
					runtime.GC()
					runtime.GC() // and what sync.Pools kept through the first
					runtime.ReadMemStats(&ms)
					live = ms.HeapAlloc
				}
			}
		})
		secs := time.Since(t0).Seconds()
		peak := stop()
		runtime.ReadMemStats(&after)
		if live == 0 {
			t.Fatalf("%d forged: the last read's end was not seen", forged)
		}
		if n := rep.Counts[audit.KindUnverifiedCheckpoint]; n != forged {
			t.Errorf("%d forged: %d counted", forged, n)
		}
		return point{forged: forged, live: live, peak: peak, alloc: after.TotalAlloc - before.TotalAlloc, secs: secs}
	}
	var pts []point
	published := 0
	sizes := []int{0, 10_000, 100_000}
	if raceEnabled {
		// The bound does not depend on the count: a cost per record would
		// show at 20,000 as it does at 100,000 (the slack is 128 KiB), and
		// both are past the 4,096 records the read fetches ahead.
		sizes = []int{0, 5_000, 20_000}
	}
	for _, n := range sizes {
		// On a connection of its own, closed and let go before verify:
		// what publishing keeps is not verify's.
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		ledgertest.PublishUnsigned(r.ctx, t, natstest.JetStream(t, nc), "S0042", n-published, func(i int) (string, int64) { return forge(published + i) })
		nc.Close()
		r.records += uint64(n - published)
		published = n
		r.wait(t)
		pts = append(pts, measure(n))
	}
	for _, p := range pts {
		t.Logf("%6d forged records: live heap at the end of the read %7.1f KiB; heap in use at its peak %6.1f MiB; allocated %7.1f MiB (%4.0f bytes a record read); %.1fs",
			p.forged, float64(p.live)/1024, float64(p.peak)/(1<<20), float64(p.alloc)/(1<<20), float64(p.alloc)/float64(r.records-uint64(published-p.forged)), p.secs)
	}
	// What an unverified record costs the verifier is its count and, for
	// the first few of a store, a line of the report: the live heap at
	// the end of the read is the same within a small constant.
	const slack = 128 << 10
	for _, p := range pts[1:] {
		if p.live > pts[0].live+slack {
			t.Errorf("%d forged records: live heap %d bytes, %d more than with none (allowed %d)", p.forged, p.live, p.live-pts[0].live, slack)
		}
	}
	// The peak holds what the read fetches ahead (4,096 records), which
	// fills once the archive is larger than that, and no more: a loose
	// bound, for the heap's peak depends on when the collector runs.
	const peakSlack = 16 << 20
	if p10, p100 := pts[1], pts[2]; p100.peak > p10.peak+peakSlack {
		t.Errorf("heap in use at its peak: %d bytes with %d forged records, %d with %d (allowed %d more)", p100.peak, p100.forged, p10.peak, p10.forged, peakSlack)
	}
}

// samplePeakHeap samples the heap in use every 10 ms until the returned
// function is called, which gives the peak.
func samplePeakHeap() func() uint64 {
	var peak uint64
	done, stopped := make(chan struct{}), make(chan struct{})
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	go func() {
		defer close(stopped)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			sample()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-stopped
		return peak
	}
}

// Records the witness refuses, as many as anyone who may write to the
// streams likes: each is counted; the pass logs a bounded number of
// lines, and still countersigns the store's own checkpoints.
func TestWitnessLogsBoundedRefusals(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const forged = 500
	ledgertest.PublishUnsigned(r.ctx, t, r.js, "S0042", forged, func(i int) (string, int64) { return r.a.Log, int64(1000 + i) })
	r.records += forged
	r.wait(t)
	skey, _, err := audit.GenerateWitnessKey(rand.Reader, "")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	var logs bytes.Buffer
	w, err := audit.NewWitness(r.ctx, audit.WitnessOptions{Conn: r.nc, Roster: r.roster, Signer: signer,
		StateFile: filepath.Join(t.TempDir(), "witness.json"), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	run, err := w.Once(r.ctx)
	if err != nil || run.Countersigned != 5 || run.Refused[audit.RefusedBadSignature] != forged {
		t.Fatalf("pass over %d forged records: %+v %v", forged, run, err)
	}
	if n := strings.Count(logs.String(), "\n"); n > 20 {
		t.Errorf("%d refusals logged in %d lines:\n%.2000s", forged, n, logs.String())
	}
}

// A store-signed checkpoint newer than the witness countersigned, stored
// in the witness stream by another identity than the witness: with the
// witness's key, prove takes only what the witness countersigned.
func TestProveTakesOnlyCountersigned(t *testing.T) {
	r := newRig(t)
	w, _, wv, wkey := newWitness(t, r, filepath.Join(t.TempDir(), "w.json"))
	if _, err := w.Once(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.a.Movements(r.ctx, t, r.js, 10)
	m := r.a.Checkpoint(r.ctx, t, r.js)
	r.records += 11
	r.wait(t)
	if _, err := r.js.Publish(r.ctx, central.WitnessSubject("S0042"), []byte(m.Note)); err != nil {
		t.Fatal(err)
	}
	key := ledgertest.Key("S0042", 32)
	p, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: key, Store: "S0042", Roster: r.roster, Witness: wv})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ledger.CheckProof(p, r.a.VKey, wkey); err != nil || !res.Witnessed || res.Checkpoint.Size != 60 {
		t.Fatalf("proof with the witness's key: %+v %v, want the countersigned checkpoint of size 60", res, err)
	}
}
