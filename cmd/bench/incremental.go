package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
)

// freshArchive is the archive of the incremental figure's baseline: as
// many records as the incremental pass reads, of stores of their own.
const freshArchive = "RX_ARCHIVE_1"

// incrementalNew is how many movements the incremental pass reads, and the
// fresh verification too: 10,000 after the whole archive (1,000,000 by
// default); with -quick 5,000 after 100,000, the same meaning (the new
// records a small part of what was verified) at a size whose timings are
// still well above a pass's fixed costs.
func incrementalNew(quick bool) int {
	if quick {
		return 5_000
	}
	return 10_000
}

// recheckBudget is the re-check budget of the pass that measures the
// rolling re-check's rate.
func recheckBudget(quick bool) int64 {
	if quick {
		return 10_000
	}
	return 200_000
}

// newVerifyStores makes verifyStores stores named prefix0001…, each with
// a key and a log, and adds their roster lines to roster.
func newVerifyStores(prefix string, roster *strings.Builder) ([]*verifyStore, error) {
	stores := make([]*verifyStore, verifyStores)
	for i := range stores {
		id := fmt.Sprintf("%s%04d", prefix, i+1)
		skey, vkey, err := ledger.GenerateKey(rand.Reader, id)
		if err != nil {
			return nil, err
		}
		signer, err := note.NewSigner(skey)
		if err != nil {
			return nil, err
		}
		log, _ := ledger.NewLogID(rand.Reader)
		stores[i] = &verifyStore{id: id, log: log, signer: signer, vkey: vkey}
		fmt.Fprintf(roster, "%s %s\n", id, vkey)
	}
	return stores, nil
}

// fillFresh fills the fresh archive with n movements of its stores, then
// gives its subjects up: what it holds stays on the archive subjects.
func (b *bench) fillFresh(ctx context.Context, js jetstream.JetStream, stores []*verifyStore, n int) error {
	cfg := jetstream.StreamConfig{Name: freshArchive, Subjects: []string{central.ArchivePrefix + ">"}, Storage: jetstream.FileStorage}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		return err
	}
	if err := b.fillVerify(ctx, js, stores, 0, n); err != nil {
		return err
	}
	cfg.Subjects = []string{"rx.bench.fresh.>"}
	_, err := js.UpdateStream(ctx, cfg)
	return err
}

// incrementalRun is the fastest of the rounds of each pass.
type incrementalRun struct {
	incSecs, freshSecs float64
	incRecords         uint64
	freshRecords       uint64
}

// measureIncremental archives nNew more movements after the n the state
// verified, then takes turns: an incremental pass from that state over
// them, and a full verification of the fresh archive's as many records;
// three rounds, the fastest of each. Then one pass re-checks a budget of
// records, for the rolling re-check's rate.
func (b *bench) measureIncremental(ctx context.Context, vh *verifyHub, stores []*verifyStore, r *provision.Roster, state *audit.MemState, n, nNew int) error {
	const sc = "9 verify"
	if err := b.fillVerify(ctx, vh.js, stores, n, n+nNew); err != nil {
		return err
	}
	if err := vh.restart(); err != nil {
		return err
	}
	saved, err := state.Load(ctx)
	if err != nil {
		return err
	}
	var run incrementalRun
	var after []byte
	for round := 0; round < 3; round++ {
		if after, err = b.incrementalRound(ctx, vh, r, saved, &run); err != nil {
			return err
		}
	}
	b.rep.ratio(sc, "verify_incremental_vs_fresh", fmt.Sprintf("an incremental pass over %d new records after %d movements verified (from the saved state; no re-check) against a full verification of %d records (%d movements of other stores), the fastest of 3 rounds taking turns",
		run.incRecords, n, run.freshRecords, nNew), run.incSecs/run.freshSecs,
		fmt.Sprintf("incremental %.0f new records/s, %.3fs; fresh %.0f records/s, %.3fs", float64(run.incRecords)/run.incSecs, run.incSecs, float64(run.freshRecords)/run.freshSecs, run.freshSecs), atMost(1.5))
	b.rep.value(sc, "verify_incremental_records_per_s", fmt.Sprintf("the incremental pass's new records/s, %d new after %d movements", run.incRecords, n), float64(run.incRecords)/run.incSecs, "/s", nil)
	return b.measureRecheck(ctx, vh, r, after)
}

// incrementalRound is one round: the incremental pass, then the fresh
// verification. It returns the state the incremental pass saved.
func (b *bench) incrementalRound(ctx context.Context, vh *verifyHub, r *provision.Roster, saved []byte, run *incrementalRun) ([]byte, error) {
	st := &audit.MemState{}
	if err := st.Save(ctx, saved); err != nil {
		return nil, err
	}
	runtime.GC()
	t0 := time.Now()
	rep, err := audit.Verify(ctx, audit.Options{Conn: vh.nc, Roster: r, Archives: []string{central.ArchiveStreamName}, State: st, RecheckBudget: -1})
	secs := time.Since(t0).Seconds()
	if err != nil {
		return nil, err
	}
	if !rep.OK() || !rep.Incremental {
		return nil, fmt.Errorf("the incremental pass found %v (incremental %v): the bench's archive should hold", rep.Counts, rep.Incremental)
	}
	if run.incSecs == 0 || secs < run.incSecs {
		run.incSecs = secs
	}
	run.incRecords = rep.Records
	b.logf("verify: incremental pass over %d new records in %.3fs (%.0f/s)", rep.Records, secs, float64(rep.Records)/secs)
	runtime.GC()
	t0 = time.Now()
	frep, err := audit.Verify(ctx, audit.Options{Conn: vh.nc, Roster: r, Archives: []string{freshArchive}})
	secs = time.Since(t0).Seconds()
	if err != nil {
		return nil, err
	}
	if !frep.OK() {
		return nil, fmt.Errorf("the fresh verification found %v: the bench's archive should hold", frep.Counts)
	}
	if run.freshSecs == 0 || secs < run.freshSecs {
		run.freshSecs = secs
	}
	run.freshRecords = frep.Records
	b.logf("verify: full verification of %d records in %.3fs (%.0f/s)", frep.Records, secs, float64(frep.Records)/secs)
	return st.Load(ctx)
}

// measureRecheck runs one pass from state with nothing new and a
// re-check budget: the rolling re-check's records/s.
func (b *bench) measureRecheck(ctx context.Context, vh *verifyHub, r *provision.Roster, saved []byte) error {
	st := &audit.MemState{}
	if err := st.Save(ctx, saved); err != nil {
		return err
	}
	budget := recheckBudget(b.size.quick)
	t0 := time.Now()
	rep, err := audit.Verify(ctx, audit.Options{Conn: vh.nc, Roster: r, Archives: []string{central.ArchiveStreamName}, State: st, RecheckBudget: budget})
	secs := time.Since(t0).Seconds()
	if err != nil {
		return err
	}
	if !rep.OK() || rep.Rechecked == 0 {
		return fmt.Errorf("the re-check pass found %v and re-read %d records", rep.Counts, rep.Rechecked)
	}
	b.logf("verify: re-checked %d records in %.2fs (%.0f/s)", rep.Rechecked, secs, float64(rep.Rechecked)/secs)
	b.rep.value("9 verify", "verify_recheck_records_per_s", fmt.Sprintf("the rolling re-check's records/s: a pass with nothing new and a budget of %d records, sweeping the archive from its start", budget),
		float64(rep.Rechecked)/secs, "/s", nil)
	return nil
}
