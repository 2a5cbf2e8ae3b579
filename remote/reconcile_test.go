package remote_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/testkit/ledgertest"
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
	op := ledgertest.OperatorSigner(t)
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
	if err := s.q.Settle(queue.Settlement{Acks: []queue.Ack{{Seq: 3, StreamSeq: 30}, {Seq: 4, StreamSeq: 40}}}); err != nil {
		t.Fatal(err)
	}
	client := fleet.NewClient(natstest.Connect(t, srv.URL()), op)
	ctx := testContext(t)

	res, err := client.Reconcile(ctx, "S0001", command.ReconcileArgs{Seqs: []command.SeqRange{{1, 8}}})
	if err != nil {
		t.Fatal(err)
	}
	want := command.ReconcileResult{Highest: 6, Runs: []command.SeqRun{
		{From: 1, To: 1, State: command.SeqPurged, Reason: "by local:pharmacist: exported for the auditor"},
		{From: 2, To: 2, State: command.SeqQuarantined, Reason: "permanent:too_large"},
		{From: 3, To: 4, State: command.SeqSynced},
		{From: 5, To: 6, State: command.SeqPending},
		{From: 7, To: 8, State: command.SeqUnknown, Reason: command.SeqNotAssigned},
	}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("reconcile:\n got %+v\nwant %+v", res, want)
	}
	// Synced after SyncedAfter is recent; a pruned key is unknown, pruned.
	res, err = client.Reconcile(ctx, "S0001", command.ReconcileArgs{Seqs: []command.SeqRange{{3, 4}}, SyncedAfter: before.Add(-time.Second)})
	if err != nil || len(res.Runs) != 1 || res.Runs[0] != (command.SeqRun{From: 3, To: 4, State: command.SeqSynced, Reason: command.SeqRecent}) {
		t.Errorf("recent: %+v, %v", res, err)
	}
	if _, err := s.q.Prune(time.Nanosecond, 0, 100); err != nil {
		t.Fatal(err)
	}
	res, err = client.Reconcile(ctx, "S0001", command.ReconcileArgs{Seqs: []command.SeqRange{{3, 4}}})
	if err != nil || len(res.Runs) != 1 || res.Runs[0] != (command.SeqRun{From: 3, To: 4, State: command.SeqUnknown, Reason: command.SeqPruned}) {
		t.Errorf("pruned: %+v, %v", res, err)
	}
	if n := len(s.events(t, queue.ActionRemote)); n != 3 {
		t.Errorf("%d remote events journalled, want 3 (one per accepted reconcile)", n)
	}

	// Unsigned: refused although the store allows unsigned reads.
	var re *command.Error
	_, err = fleet.NewClient(natstest.Connect(t, srv.URL()), nil).Reconcile(ctx, "S0001", command.ReconcileArgs{Seqs: []command.SeqRange{{1, 1}}})
	if err == nil || !strings.Contains(err.Error(), "must be signed") {
		t.Errorf("unsigned reconcile: %v, want it refused", err)
	}
	rep := sendRaw(t, natstest.Connect(t, srv.URL()), command.Subject("S0001", command.CmdReconcile), []byte(`{"args":{"seqs":[[1,1]]}}`))
	if rep.OK || rep.Code != command.CodeUnsigned {
		t.Errorf("unsigned envelope: %+v, want refused as unsigned", rep)
	}
	// Over the limits: a bad request naming the limit.
	many := make([]command.SeqRange, command.MaxReconcileRanges+1)
	for i := range many {
		many[i] = command.SeqRange{uint64(i + 1), uint64(i + 1)}
	}
	for name, a := range map[string]command.ReconcileArgs{
		"too many":   {Seqs: []command.SeqRange{{1, command.MaxReconcileSeqs + 1}}},
		"huge range": {Seqs: []command.SeqRange{{1, 1 << 63}}},
		"overflow":   {Seqs: []command.SeqRange{{1, 6000}, {7000, 13000}}},
		"ranges":     {Seqs: many[:command.MaxReconcileRanges+1]},
		"zero":       {Seqs: []command.SeqRange{{0, 3}}},
		"reversed":   {Seqs: []command.SeqRange{{5, 3}}},
		"empty":      {},
	} {
		_, err := client.Reconcile(ctx, "S0001", a)
		if !errors.As(err, &re) || re.Code != command.CodeBadRequest {
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
