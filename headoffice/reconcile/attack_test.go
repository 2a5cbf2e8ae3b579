package reconcile_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/reconcile"
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
	synced := func(_ context.Context, _ string, a command.ReconcileArgs) (command.ReconcileResult, error) {
		res := command.ReconcileResult{Highest: math.MaxUint64}
		for _, rg := range a.Seqs {
			res.Runs = append(res.Runs, command.SeqRun{From: rg[0], To: rg[1], State: command.SeqSynced})
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

// TestRunAfterTheArchiveAgedOut: the archive keeps a movement for its
// retention, then drops it. A store's sequences that aged out are not
// missing: a full reconciliation two years on must not report them.
func TestRunAfterTheArchiveAgedOut(t *testing.T) {
	r := newRig(t, nil)
	cfg := central.ArchiveConfig(central.StreamOptions{DuplicateWindow: 100 * time.Millisecond, Retention: 1500 * time.Millisecond})
	cfg.Sources, cfg.Subjects = nil, []string{central.ArchiveSubject("S0001"), central.ArchiveSubject("S0002")}
	arch, err := r.js.CreateStream(r.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		r.put(archiveMsg("S0001", seq, "", "", time.Now()))
	}
	r.put(archiveMsg("S0002", 1, "", "", time.Now()))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		info, err := arch.Info(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archive still holds %d messages", info.State.Msgs)
		}
	}
	// Sequences 4 and 5 are archived within the retention; 6 is lost.
	for seq := uint64(4); seq <= 5; seq++ {
		r.put(archiveMsg("S0001", seq, "", "", time.Now()))
	}
	r.fleet("S0001", 6)
	r.fleet("S0002", 1) // nothing of it is left
	k := &asker{answer: func(_ context.Context, _ string, a command.ReconcileArgs) (command.ReconcileResult, error) {
		res := command.ReconcileResult{Highest: 6}
		for _, rg := range a.Seqs {
			res.Runs = append(res.Runs, command.SeqRun{From: rg[0], To: rg[1], State: command.SeqSynced})
		}
		return res, nil
	}}
	rep, err := reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc, Asker: k})
	if err != nil {
		t.Fatal(err)
	}
	s1 := storeOf(t, rep, "S0001")
	if s1.Checked == nil || *s1.Checked != (reconcile.Range{From: 4, To: 6}) || s1.Missing != 1 || s1.UnexplainedCount() != 1 {
		t.Errorf("S0001: checked %v, %d missing, unexplained %v; want 4..6 checked and 6 missing", s1.Checked, s1.Missing, s1.Unexplained)
	}
	if s2 := storeOf(t, rep, "S0002"); s2.Checked != nil || s2.Missing != 0 {
		t.Errorf("S0002: checked %v, %d missing; want nothing checked", s2.Checked, s2.Missing)
	}
}

// TestRunBoundsTheHalving: a store that answers every request "too large"
// must not make head office ask it about each missing sequence alone
// (twice as many requests as sequences asked).
func TestRunBoundsTheHalving(t *testing.T) {
	r := newRig(t, map[string][]string{central.ArchiveStreamName: {"S0666"}})
	r.put(archiveMsg("S0666", 1, "", "", time.Now()))
	r.fleet("S0666", 100_001)
	k := &asker{answer: func(_ context.Context, store string, _ command.ReconcileArgs) (command.ReconcileResult, error) {
		return command.ReconcileResult{}, &command.Error{Store: store, Cmd: command.CmdReconcile, Code: command.CodeReplyTooLarge}
	}}
	rep, err := reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc, Asker: k})
	if err != nil {
		t.Fatal(err)
	}
	s := storeOf(t, rep, "S0666")
	if n := len(k.asked["S0666"]); n > 2*10*reconcile.MaxRequestsPerChunk {
		t.Errorf("S0666 was asked %d times about %d sequences", n, reconcile.DefaultMaxAskPerStore)
	}
	if s.Missing != 100_000 || s.UnexplainedCount() != 100_000 || s.Unexplained[reconcile.UnexplainedBadAnswer] != 100_000 {
		t.Errorf("S0666: %d missing, unexplained %v; want 100,000 bad answers", s.Missing, s.Unexplained)
	}
}

// TestRunForgedMigratedCopyIsNotSkipped: a store's agent sets whatever
// headers it likes, Rx-Migrated-From too. After a move to partitions, a
// store that rewrites one of its movements past the horizon and marks
// the new version as the migration's copy must still be reported in
// conflict: only a copy whose original (same key, content and sequence)
// is in RX_ARCHIVE is skipped.
func TestRunForgedMigratedCopyIsNotSkipped(t *testing.T) {
	r := newRig(t, map[string][]string{central.ArchiveStreamName: {"S0001"}})
	now := time.Now()
	r.migrated("S0001", 3, now)
	forged := archiveMsg("S0001", 2, "", "rewritten", now) // key and sequence of 2, another content
	forged.Subject = "copy.S0001"
	forged.Header.Set(central.HeaderMigratedFrom, central.StreamName)
	r.put(forged)
	r.fleet("S0001", 3)

	rep, err := reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc, Archives: []string{central.ArchiveStreamName, "RX_ARCHIVE_0"}})
	if err != nil {
		t.Fatal(err)
	}
	s1 := storeOf(t, rep, "S0001")
	if rep.Streams[1].MigratedCopies != 3 || s1.Conflicts != 1 || s1.Repeats != 0 || rep.OK() {
		t.Errorf("streams %+v, S0001 %+v; want the 3 true copies skipped and the rewrite in conflict", rep.Streams, s1)
	}
}
