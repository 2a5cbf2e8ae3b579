package reconcile_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/reconcile"
	"github.com/rxedge/agent/remote"
)

// TestRunForgedHighestCannotHideAGap: a store's fleet summary is its own
// to write. One claiming a highest sequence of 2^64-5 must not wrap the
// total of unexplained sequences round to 0 and so hide another store's
// five sequences that central lost.
func TestRunForgedHighestCannotHideAGap(t *testing.T) {
	r := newRig(t, map[string][]string{central.ArchiveStreamName: {"S0001", "S0666"}})
	for seq := uint64(1); seq <= 3; seq++ {
		r.put(archiveMsg("S0001", seq, "", "", time.Now()))
	}
	r.fleet("S0001", 8)                // 4..8 lost by central
	r.fleet("S0666", math.MaxUint64-4) // forged
	synced := func(_ context.Context, _ string, a remote.ReconcileArgs) (remote.ReconcileResult, error) {
		res := remote.ReconcileResult{Highest: math.MaxUint64}
		for _, rg := range a.Seqs {
			res.Runs = append(res.Runs, remote.SeqRun{From: rg[0], To: rg[1], State: remote.SeqSynced})
		}
		return res, nil
	}
	rep, err := reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc, Asker: &asker{answer: synced}, MaxAskPerStore: 10})
	if err != nil {
		t.Fatal(err)
	}
	if s := storeOf(t, rep, "S0001"); s.UnexplainedCount() != 5 || s.OK() {
		t.Fatalf("S0001: %+v; want 5 unexplained", s)
	}
	if rep.OK() {
		t.Errorf("the report is OK with S0001's five sequences lost: total unexplained %d, missing %d", rep.Total.UnexplainedCount(), rep.Total.Missing)
	}
	if rep.Total.UnexplainedCount() < 5 || rep.Total.Missing < 5 {
		t.Errorf("total unexplained %d, missing %d: the sums wrapped", rep.Total.UnexplainedCount(), rep.Total.Missing)
	}
}
