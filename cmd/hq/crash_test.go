//go:build unix

package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/internal/holdpoint"
)

// holdAndKill starts hq run held at point, waits until it says it holds
// there, and kills it with SIGKILL.
func (r *hqRig) holdAndKill(t *testing.T, point string) {
	t.Helper()
	p := r.start(t, holdpoint.Env+"="+point)
	eventually(t, "hq run holds at "+point, func() bool { return p.logged("HQ_HOLD point=" + point) })
	p.kill(t)
}

// archived is the number of messages central's archive holds.
func (r *hqRig) archived(t *testing.T) uint64 {
	t.Helper()
	st, err := r.admin.Stream(context.Background(), central.ArchiveStreamName)
	if err != nil {
		t.Fatalf("archive: %v", err)
	}
	return st.CachedInfo().State.Msgs
}

// countersignedTwice reads the witness stream and returns the
// countersignatures published more than once: a store's subject and a
// log's size (the message id) seen again.
func (r *hqRig) countersignedTwice(t *testing.T) (total int, twice []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := r.admin.Stream(ctx, central.WitnessStreamName)
	if err != nil {
		t.Fatalf("witness stream: %v", err)
	}
	n := st.CachedInfo().State.Msgs
	cons, err := r.admin.OrderedConsumer(ctx, central.WitnessStreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("witness stream: %v", err)
	}
	seen := map[string]int{}
	for i := uint64(0); i < n; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatalf("witness stream, message %d of %d: %v", i+1, n, err)
		}
		k := m.Subject() + " " + m.Headers().Get(central.HeaderMsgID)
		seen[k]++
		if seen[k] == 2 {
			twice = append(twice, k)
		}
	}
	return int(n), twice
}

// submitArchived submits movements n0..n1-1 of store and waits until
// central archived them and the checkpoint of them.
func (r *hqRig) submitArchived(t *testing.T, store string, n0, n1 int) {
	t.Helper()
	before := r.archived(t)
	r.submit(t, store, n0, n1)
	eventually(t, fmt.Sprintf("%s's %d new movements and a checkpoint of them archived", store, n1-n0), func() bool {
		return r.archived(t) >= before+uint64(n1-n0)+1
	})
}

// TestServiceKilledDuringEachJob kills the built hq run with SIGKILL
// inside each job (holdpoint: the sink inside a batch's transaction,
// reconciliation after its read, the witness between a
// countersignature's publish and its state's save, verification once it
// read archive records and inside the transaction recording a pass),
// each time with work for that job to do, and restarts it: nothing is
// written twice to PostgreSQL (the rows, counted against the archive),
// no checkpoint is countersigned twice (the witness stream, per store
// and log size), and verification resumes from its stored position (its
// passes after the restart read only what was archived since).
func TestServiceKilledDuringEachJob(t *testing.T) {
	r := newHQRig(t)
	r.holdAndKill(t, holdpoint.SinkBatch) // a fresh database: the first batch holds
	if n := r.count(t, `SELECT count(*) FROM movements`); n > 0 {
		t.Fatalf("%d movements committed by a batch killed before its commit", n)
	}
	r.holdAndKill(t, holdpoint.ReconcilePass) // every start reconciles first
	// A checkpoint no witness has seen: the next one countersigns it.
	r.submitArchived(t, "S0002", 5, 9)
	r.holdAndKill(t, holdpoint.WitnessPublish)

	p := r.start(t)
	eventually(t, "the sink writes the 19 movements, the witness countersigns, verification records a pass", func() bool {
		return r.count(t, `SELECT count(*) FROM movements`) == 19 && r.witnessed(t) >= 4 && passes(scrape(r.metrics), "verify") >= 1
	})
	p.kill(t)
	saved := r.count(t, `SELECT passes FROM verify_state`)
	before := r.archived(t)
	r.submitArchived(t, "S0001", 5, 9)
	// Every start verifies first, and reads what was archived since.
	for _, point := range []string{holdpoint.VerifyRead, holdpoint.VerifyRecord} {
		r.holdAndKill(t, point)
		if n := r.count(t, `SELECT passes FROM verify_state`); n != saved {
			t.Fatalf("verify_state counts %d passes after a pass killed at %s, want %d", n, point, saved)
		}
	}

	r.start(t)
	var m map[string]float64
	eventually(t, "the sink writes the 23 movements, verification and reconciliation complete a pass", func() bool {
		m = scrape(r.metrics)
		return r.count(t, `SELECT count(*) FROM movements`) == 23 && passes(m, "verify") >= 1 && passes(m, "reconcile") >= 1
	})
	total := r.archived(t)
	if m[`rxedge_hq_verify_last_pass_incremental`] != 1 {
		t.Errorf("verification's first pass after the restart did not start from its stored state")
	}
	// Every pass since the restart together read for the first time
	// what was archived since the last recorded pass, not the archive.
	var read float64
	for _, kind := range []string{"movement", "checkpoint", "other"} {
		read += m[`rxedge_hq_verify_records_total{kind="`+kind+`"}`]
	}
	if read == 0 || uint64(read) >= total {
		t.Errorf("verification's passes after the restart read %v records for the first time, want the new ones (of %d archived, %d before the kill)", read, total, before)
	}
	t.Logf("verification after the restart: %v records read of %d archived", read, total)

	// Every archive message is in exactly one table, once.
	written := r.count(t, `SELECT (SELECT count(*) FROM movements) + (SELECT count(*) FROM movement_repeats)
		+ (SELECT count(*) FROM movement_conflicts) + (SELECT count(*) FROM sink_rejects) + (SELECT checkpoints FROM sink_positions)`)
	if written != int64(total) {
		t.Errorf("PostgreSQL holds %d rows and checkpoints for the archive's %d messages", written, total)
	}
	if n := r.count(t, `SELECT rows FROM sink_positions`); n != 23 {
		t.Errorf("sink_positions counts %d rows for the 23 movements", n)
	}
	if n := r.count(t, `SELECT count(*) FROM movement_repeats`); n != 0 {
		t.Errorf("%d repeats: a movement was written again", n)
	}
	eventually(t, "the witness countersigns the new checkpoint", func() bool { return r.witnessed(t) >= 5 })
	n, twice := r.countersignedTwice(t)
	if len(twice) > 0 {
		t.Errorf("of %d countersignatures, published more than once: %v", n, twice)
	}
}
