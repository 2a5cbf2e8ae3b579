package remote_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestReconcileCommand asks a store, over a real server, about sequences
// in every state: pending, quarantined (with its reason), purged (with
// who and why, from the journal), synced (recent or not), pruned and
// never assigned. The command must be signed even where unsigned reads
// are allowed, is journalled, and refuses requests over its limits
// without doing anything.
func TestReconcileCommand(t *testing.T) {
	srv := natstest.StartHub(t)
	op := operator(t)
	s := startStoreWith(t, srv.URL(), "S0001", []string{op.PublicKey()}, 2, func(o *remote.Options) { o.AllowUnsignedReads = true })
	// Sequences 1 and 2 are quarantined; purge 1 as an operator.
	k1, _ := movement.ParseKey(s.keys[0])
	if _, err := s.q.Purge(queue.Purge{Keys: [][16]byte{k1}, Actor: "local:pharmacist", Reason: "exported for the auditor"}); err != nil {
		t.Fatal(err)
	}
	// 3..6 pending; 3 and 4 then synced.
	var items []movement.Prepared
	for i := range 4 {
		p, es := movement.Prepare(fmt.Appendf(nil, `{"movement_id":"P%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, i), "S0001", time.Now())
		if es != nil {
			t.Fatal(es)
		}
		items = append(items, p)
	}
	if _, err := s.q.Enqueue(items); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := s.q.MarkSynced([]queue.Ack{{Seq: 3, StreamSeq: 30}, {Seq: 4, StreamSeq: 40}}); err != nil {
		t.Fatal(err)
	}
	client := remote.NewClient(natstest.Connect(t, srv.URL()), op)
	ctx := testContext(t)

	res, err := client.Reconcile(ctx, "S0001", remote.ReconcileArgs{Seqs: []remote.SeqRange{{1, 8}}})
	if err != nil {
		t.Fatal(err)
	}
	want := remote.ReconcileResult{Highest: 6, Runs: []remote.SeqRun{
		{From: 1, To: 1, State: remote.SeqPurged, Reason: "by local:pharmacist: exported for the auditor"},
		{From: 2, To: 2, State: remote.SeqQuarantined, Reason: "permanent:too_large"},
		{From: 3, To: 4, State: remote.SeqSynced},
		{From: 5, To: 6, State: remote.SeqPending},
		{From: 7, To: 8, State: remote.SeqUnknown, Reason: remote.SeqNotAssigned},
	}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("reconcile:\n got %+v\nwant %+v", res, want)
	}
	// Synced after SyncedAfter is recent; a pruned key is unknown, pruned.
	res, err = client.Reconcile(ctx, "S0001", remote.ReconcileArgs{Seqs: []remote.SeqRange{{3, 4}}, SyncedAfter: before.Add(-time.Second)})
	if err != nil || len(res.Runs) != 1 || res.Runs[0] != (remote.SeqRun{From: 3, To: 4, State: remote.SeqSynced, Reason: remote.SeqRecent}) {
		t.Errorf("recent: %+v, %v", res, err)
	}
	if _, err := s.q.Prune(time.Nanosecond, 0, 100); err != nil {
		t.Fatal(err)
	}
	res, err = client.Reconcile(ctx, "S0001", remote.ReconcileArgs{Seqs: []remote.SeqRange{{3, 4}}})
	if err != nil || len(res.Runs) != 1 || res.Runs[0] != (remote.SeqRun{From: 3, To: 4, State: remote.SeqUnknown, Reason: remote.SeqPruned}) {
		t.Errorf("pruned: %+v, %v", res, err)
	}
	if n := len(s.events(t, queue.ActionRemote)); n != 3 {
		t.Errorf("%d remote events journalled, want 3 (one per accepted reconcile)", n)
	}

	// Unsigned: refused although the store allows unsigned reads.
	var re *remote.Error
	_, err = remote.NewClient(natstest.Connect(t, srv.URL()), nil).Reconcile(ctx, "S0001", remote.ReconcileArgs{Seqs: []remote.SeqRange{{1, 1}}})
	if err == nil || !strings.Contains(err.Error(), "must be signed") {
		t.Errorf("unsigned reconcile: %v, want it refused", err)
	}
	rep := sendRaw(t, natstest.Connect(t, srv.URL()), remote.Subject("S0001", remote.CmdReconcile), []byte(`{"args":{"seqs":[[1,1]]}}`))
	if rep.OK || rep.Code != remote.CodeUnsigned {
		t.Errorf("unsigned envelope: %+v, want refused as unsigned", rep)
	}
	// Over the limits: a bad request naming the limit.
	many := make([]remote.SeqRange, remote.MaxReconcileRanges+1)
	for i := range many {
		many[i] = remote.SeqRange{uint64(i + 1), uint64(i + 1)}
	}
	for name, a := range map[string]remote.ReconcileArgs{
		"too many":   {Seqs: []remote.SeqRange{{1, remote.MaxReconcileSeqs + 1}}},
		"huge range": {Seqs: []remote.SeqRange{{1, 1 << 63}}},
		"overflow":   {Seqs: []remote.SeqRange{{1, 6000}, {7000, 13000}}},
		"ranges":     {Seqs: many[:remote.MaxReconcileRanges+1]},
		"zero":       {Seqs: []remote.SeqRange{{0, 3}}},
		"reversed":   {Seqs: []remote.SeqRange{{5, 3}}},
		"empty":      {},
	} {
		_, err := client.Reconcile(ctx, "S0001", a)
		if !errors.As(err, &re) || re.Code != remote.CodeBadRequest {
			t.Errorf("%s: %v, want a bad request", name, err)
			continue
		}
		if name == "too many" && !strings.Contains(err.Error(), "at most 10000 sequences") {
			t.Errorf("%s: %v, want the limit said", name, err)
		}
	}
	if n := len(s.events(t, queue.ActionRemote)); n != 3 {
		t.Errorf("%d remote events journalled after refused requests, want still 3", n)
	}
}

// TestReconcileLimitsFitAnEnvelope: the largest request allowed, with the
// largest sequences, fits in a command's envelope, signed.
func TestReconcileLimitsFitAnEnvelope(t *testing.T) {
	a := remote.ReconcileArgs{SyncedAfter: time.Now()}
	for i := range remote.MaxReconcileRanges {
		s := ^uint64(0) - uint64(2*i)
		a.Seqs = append(a.Seqs, remote.SeqRange{s, s})
	}
	e, err := remote.NewEnvelope("S0001", remote.CmdReconcile, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := operator(t).Sign(&e, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := len(mustJSON(t, e)); n > remote.MaxEnvelopeBytes {
		t.Errorf("the largest reconcile request is %d bytes, over the envelope's %d", n, remote.MaxEnvelopeBytes)
	}
}
