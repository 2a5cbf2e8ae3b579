package provision_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/status"
)

// TestProductionConfigOperatorFollowsTheFleet: the operator's identity,
// which hq's console and fleet watch run as, may follow the fleet view
// with an ordered consumer (fleet.Index): it reads every store's last
// summary, then each new one as the store writes it; the auditor's
// follows the witness's countersignatures for it.
func TestProductionConfigOperatorFollowsTheFleet(t *testing.T) {
	h := startProduction(t, 1)
	a := dial(t, h.URL(), storeA)
	write := func(state string) {
		t.Helper()
		b, _ := json.Marshal(command.Summary{StoreID: "S0001", State: state, GeneratedAt: time.Now()})
		if _, err := a.js.Publish(testContext(t), central.FleetSubject("S0001"), b); err != nil {
			t.Fatal(err)
		}
	}
	write(status.Online)
	o, au, wi := dial(t, h.URL(), ops), dial(t, h.URL(), audit), dial(t, h.URL(), witness)
	signer, vkey := witnessKey(t)
	ix := fleet.NewIndex(fleet.IndexOptions{
		Limits:     fleet.Limits{Stale: time.Minute, Silent: time.Hour, MaxAge: time.Hour},
		WitnessKey: vkey, WitnessJS: jsWithPrefix(t, au, central.AuditAPIPrefix),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx, o.js) }()
	defer func() { cancel(); <-done }()
	select {
	case <-ix.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the operator's index was not ready within 30s: may it follow the fleet view?")
	}
	if r, ok := ix.Get("S0001"); !ok || r.Summary == nil || r.Summary.State != status.Online {
		t.Fatalf("S0001: %+v, want its summary", r)
	}
	write(status.Paused)
	awaitIndex(t, ix, "S0001's new summary", func(r fleet.Record) bool { return r.Summary.State == status.Paused })
	log, _ := ledger.NewLogID(rand.Reader)
	n := &note.Note{Text: ledger.Checkpoint{Store: "S0001", Log: log, Size: 3, First: 1, Time: time.Now()}.Text()}
	msg, err := note.Sign(n, signer)
	if err != nil {
		t.Fatal(err)
	}
	if err := wi.nc.Publish(central.WitnessSubject("S0001"), msg); err != nil {
		t.Fatal(err)
	}
	awaitIndex(t, ix, "the countersignature", func(r fleet.Record) bool { return r.Witnessed != nil && r.Witnessed.Size == 3 })
}

// awaitIndex polls ix's record of S0001 until cond holds, for at most
// 30 seconds.
func awaitIndex(t *testing.T, ix *fleet.Index, what string, cond func(fleet.Record) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for r, _ := ix.Get("S0001"); !cond(r); r, _ = ix.Get("S0001") {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for the index to see %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// jsWithPrefix is c's JetStream under an API prefix.
func jsWithPrefix(t *testing.T, c *client, prefix string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.NewWithAPIPrefix(c.nc, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
