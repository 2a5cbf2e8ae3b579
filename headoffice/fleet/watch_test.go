package fleet_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

// publishSummary writes a store's summary into the fleet view as its
// agent does (remote.PublishSummary).
func publishSummary(t *testing.T, js jetstream.JetStream, s command.Summary) {
	t.Helper()
	b, _ := json.Marshal(s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, central.FleetSubject(s.StoreID), b); err != nil {
		t.Fatal(err)
	}
}

// waitIndex polls the index until cond holds, failing after 30 seconds
// with what was awaited.
func waitIndex(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for the index: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIndexFollowsTheFleetView runs the index against a real server:
// it reads the last summary of every store written before it started
// (three summaries of S0001, one of S0002), then the new ones as they
// come, across a restart of the server; and it follows the witness
// stream, keeping only countersignatures the witness key verifies.
func TestIndexFollowsTheFleetView(t *testing.T) {
	srv := natstest.StartHub(t)
	js := natstest.JetStream(t, natstest.Connect(t, srv.URL()))
	now := time.Now()
	logID, err := ledger.NewLogID(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		publishSummary(t, js, command.Summary{StoreID: "S0001", State: status.Online, Pending: uint64(i), GeneratedAt: now})
	}
	publishSummary(t, js, command.Summary{StoreID: "S0002", State: status.Offline, GeneratedAt: now, CheckpointLog: logID, CheckpointSize: 4})

	wskey, wvkey, err := note.GenerateKey(rand.Reader, "rxedge-witness")
	if err != nil {
		t.Fatal(err)
	}
	ix := fleet.NewIndex(fleet.IndexOptions{
		Roster: []fleet.RosterStore{{Store: "S0001"}, {Store: "S0002"}, {Store: "S0003"}},
		Limits: fleet.Limits{Stale: time.Minute, Silent: time.Hour, MaxAge: time.Hour}, WitnessKey: wvkey,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// The index's own connection reconnects for ever, as hq's does.
	nc := natstest.Connect(t, srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	go func() { done <- ix.Run(ctx, natstest.JetStream(t, nc)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
	select {
	case <-ix.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the index was not ready within 30s")
	}
	r1, _ := ix.Get("S0001")
	r3, _ := ix.Get("S0003")
	if r1.Summary == nil || r1.Summary.Pending != 2 || r3.State != fleet.Missing {
		t.Fatalf("after the start: S0001 %+v, S0003 %s; want the last summary (pending 2), S0003 missing", r1.Summary, r3.State)
	}
	if p := ix.Query(fleet.Query{State: fleet.CondOffline}); p.Matched != 1 || p.Records[0].Store != "S0002" {
		t.Errorf("offline: %+v", p.Records)
	}

	publishSummary(t, js, command.Summary{StoreID: "S0003", State: status.Online, Quarantined: 1, GeneratedAt: now})
	waitIndex(t, "S0003 quarantining", func() bool { return ix.Query(fleet.Query{State: fleet.CondQuarantining}).Matched == 1 })

	checkWitness(t, ix, js, wskey, logID, now)

	// Central restarts: the ordered consumer carries on from where it was.
	srv.Restart(t)
	js2 := natstest.JetStream(t, natstest.Connect(t, srv.URL()))
	publishSummary(t, js2, command.Summary{StoreID: "S0001", State: status.Paused, Reason: "stream full", GeneratedAt: now})
	waitIndex(t, "S0001 paused after the restart", func() bool { return ix.Query(fleet.Query{State: fleet.CondPaused}).Matched == 1 })
	if got := ix.Len(); got != 3 {
		t.Errorf("%d stores, want 3", got)
	}
}

// TestIndexReadyOnAnEmptyFleet: with nothing in the fleet view yet, the
// index is ready at once, every roster store missing.
func TestIndexReadyOnAnEmptyFleet(t *testing.T) {
	srv := natstest.StartHub(t)
	ix := fleet.NewIndex(fleet.IndexOptions{Roster: []fleet.RosterStore{{Store: "S0001"}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx, natstest.JetStream(t, natstest.Connect(t, srv.URL()))) }()
	defer func() { cancel(); <-done }()
	select {
	case <-ix.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("an index over an empty fleet view was not ready within 30s")
	}
	if r, _ := ix.Get("S0001"); r.State != fleet.Missing {
		t.Errorf("S0001 is %s, want missing", r.State)
	}
}

// TestReadMoreStoresThanOneAnswer: the fleet view of a chain larger than
// what the server answers one multi-subject request with (1,024
// subjects) is read whole.
func TestReadMoreStoresThanOneAnswer(t *testing.T) {
	srv := natstest.StartHub(t)
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	const n = 1500
	for i := range n {
		b, _ := json.Marshal(command.Summary{StoreID: fmt.Sprintf("S%05d", i), State: status.Online, GeneratedAt: time.Now()})
		if _, err := js.PublishAsync(central.FleetSubject(fmt.Sprintf("S%05d", i)), b); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 {
			<-js.PublishAsyncComplete()
		}
	}
	// A store that writes again is read once, with its newest summary.
	publishSummary(t, js, command.Summary{StoreID: "S00007", State: status.Paused, GeneratedAt: time.Now()})
	entries, err := fleet.Read(t.Context(), nc)
	if err != nil {
		t.Fatalf("read %d stores: %v", n, err)
	}
	if len(entries) != n {
		t.Fatalf("read %d entries, want %d", len(entries), n)
	}
	view := fleet.Judge(entries, nil, time.Now(), fleet.Limits{Stale: time.Minute, Silent: time.Hour, MaxAge: time.Hour})
	if view[7].Store != "S00007" || view[7].Summary.State != status.Paused {
		t.Errorf("S00007: %+v, want its newest summary (paused)", view[7])
	}
}

// checkWitness publishes a forged countersignature of S0002's checkpoint
// and then the witness's own: the forged one is passed over and counted,
// the witness's is kept.
func checkWitness(t *testing.T, ix *fleet.Index, js jetstream.JetStream, wskey, logID string, now time.Time) {
	t.Helper()
	ctx := t.Context()
	witnessed := func(signer note.Signer, size int64) []byte {
		n := &note.Note{Text: ledger.Checkpoint{Store: "S0002", Log: logID, Size: size, First: 1, Time: now}.Text()}
		out, err := note.Sign(n, signer)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	forger, _, _ := note.GenerateKey(rand.Reader, "rxedge-witness")
	fs, _ := note.NewSigner(forger)
	ws, _ := note.NewSigner(wskey)
	for _, body := range [][]byte{witnessed(fs, 4), witnessed(ws, 4)} {
		if _, err := js.Publish(ctx, central.WitnessSubject("S0002"), body); err != nil {
			t.Fatal(err)
		}
	}
	countersigned := func() bool {
		r, _ := ix.Get("S0002")
		_, yes := r.Countersigned(ix.Following())
		return yes
	}
	waitIndex(t, "S0002's checkpoint countersigned", countersigned)
	if ix.Stats().Unreadable != 1 {
		t.Errorf("unreadable = %d, want 1 (the forged countersignature)", ix.Stats().Unreadable)
	}

}
