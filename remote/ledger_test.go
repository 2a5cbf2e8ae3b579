package remote_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// askLedger sends a ledger command signed by op (unsigned when op is nil).
func askLedger(t *testing.T, c *fleet.Client, op *command.Signer, store string, a command.LedgerArgs) (command.LedgerResult, error) {
	t.Helper()
	e, err := command.NewEnvelope(store, command.CmdLedger, a)
	if err != nil {
		t.Fatal(err)
	}
	if op != nil {
		if err := op.Sign(&e, time.Now(), command.DefaultValidity); err != nil {
			t.Fatal(err)
		}
	}
	var res command.LedgerResult
	err = c.Send(testContext(t), e, &res)
	return res, err
}

// TestLedgerCommand asks a store, over a real server, for its newest
// checkpoint, its key and the leaves it holds. It must be signed even
// where unsigned reads are allowed, and a range over the limit is refused.
func TestLedgerCommand(t *testing.T) {
	srv := natstest.StartHub(t)
	op := ledgertest.OperatorSigner(t)
	skey, vkey, _ := ledger.GenerateKey(rand.Reader, "S0001")
	s := startStoreWith(t, srv.URL(), "S0001", []string{op.PublicKey()}, 2, func(o *remote.Options) {
		o.AllowUnsignedReads = true
		o.PublicKey = func() string { return vkey }
	})
	client := fleet.NewClient(natstest.Connect(t, srv.URL()), op)

	res, err := askLedger(t, client, op, "S0001", command.LedgerArgs{})
	if err != nil || res.Checkpoint != "" || res.Published || res.PublicKey != vkey || len(res.Leaves) != 0 {
		t.Fatalf("before any checkpoint: %+v, %v", res, err)
	}
	var items []movement.Prepared
	for i := range 3 {
		p, _ := movement.Prepare(fmt.Appendf(nil, `{"movement_id":"L%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, i), "S0001", time.Now())
		items = append(items, p)
	}
	if _, err := s.q.Enqueue(items); err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	sc, err := s.q.SignCheckpoint(time.Now(), func(c ledger.Checkpoint) ([]byte, error) { return ledger.Sign(c, signer) })
	if err != nil {
		t.Fatal(err)
	}
	res, err = askLedger(t, client, op, "S0001", command.LedgerArgs{Leaves: &command.SeqRange{2, 9}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint != sc.Note || res.Published {
		t.Fatalf("checkpoint %q published %v, want %q unpublished", res.Checkpoint, res.Published, sc.Note)
	}
	v, _ := note.NewVerifier(vkey)
	if _, cp, err := ledger.Open([]byte(res.Checkpoint), note.VerifierList(v)); err != nil || cp.Size != 5 {
		t.Fatalf("the answered checkpoint: %+v, %v", cp, err)
	}
	// Sequences 2..5 are held (1 and 2 quarantined, 3..5 pending); 6..9
	// were never given.
	if len(res.Leaves) != 4 || res.Leaves[0].Seq != 2 || res.Leaves[3].Seq != 5 {
		t.Fatalf("leaves %+v", res.Leaves)
	}
	if res.Leaves[1].Key != hex.EncodeToString(items[0].Key[:]) || res.Leaves[1].Digest != hex.EncodeToString(items[0].Digest[:]) {
		t.Fatalf("leaf 3 = %+v, want movement L0", res.Leaves[1])
	}
	if err := s.q.CheckpointPublished(sc.ID); err != nil {
		t.Fatal(err)
	}
	if res, err = askLedger(t, client, op, "S0001", command.LedgerArgs{}); err != nil || !res.Published {
		t.Fatalf("after central acknowledged: %+v, %v", res, err)
	}

	// Unsigned: refused although the store allows unsigned reads.
	var re *command.Error
	if _, err := askLedger(t, fleet.NewClient(natstest.Connect(t, srv.URL()), nil), nil, "S0001", command.LedgerArgs{}); !errors.As(err, &re) || re.Code != command.CodeUnsigned {
		t.Errorf("unsigned ledger: %v, want refused as unsigned", err)
	}
	for name, a := range map[string]command.LedgerArgs{
		"too many": {Leaves: &command.SeqRange{1, command.MaxLedgerLeaves + 1}},
		"huge":     {Leaves: &command.SeqRange{1, 1 << 63}},
		"zero":     {Leaves: &command.SeqRange{0, 3}},
		"reversed": {Leaves: &command.SeqRange{5, 3}},
	} {
		if _, err := askLedger(t, client, op, "S0001", a); !errors.As(err, &re) || re.Code != command.CodeBadRequest {
			t.Errorf("%s: %v, want a bad request", name, err)
		}
	}
}
