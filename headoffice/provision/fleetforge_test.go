package provision_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/reconcile"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/status"
)

// TestProductionConfigForgedFleetHeaders: a store may write only its own
// key of the fleet view, but what it writes there may carry the headers
// central adds to a direct get's answer (Nats-Subject naming another
// store's key, Nats-Time-Stamp, Nats-Sequence, Nats-Stream), and ops may
// aim a direct get's answer at a store's key, where the stream stores it
// with central's headers. Neither answers for another store: the fleet
// view read by direct gets (ops, the auditor), the index that follows it
// and the reconciliation each take the store from central's own subject,
// call the forged record unverifiable, and take S0002's highest sequence
// from S0002's own summary, so its ten lost movements are reported.
func TestProductionConfigForgedFleetHeaders(t *testing.T) {
	h := startProduction(t, 1)
	a, b := dial(t, h.URL(), storeA), dial(t, h.URL(), storeB)
	o, au := dial(t, h.URL(), ops), dial(t, h.URL(), audit)
	ctx := testContext(t)
	for seq := uint64(1); seq <= 30; seq++ {
		m := central.Message{Store: "S0002", Key: fmt.Sprintf("%032x", seq), Digest: fmt.Sprintf("%064x", seq), Seq: seq, EnqueuedAt: time.Now(), Payload: []byte(`{}`)}
		if _, err := b.js.PublishMsg(ctx, m.Msg()); err != nil {
			t.Fatalf("store B publishes movement %d: %v", seq, err)
		}
	}
	// S0002 acknowledged 40; central has 30 of them.
	if err := remote.PublishSummary(ctx, b.nc, "S0002", &status.Status{StoreID: "S0002", HighestSeq: 40}); err != nil {
		t.Fatal(err)
	}
	forge := func(t *testing.T) {
		body, _ := json.Marshal(command.Summary{StoreID: "S0002", HighestSeq: 30, GeneratedAt: time.Now()})
		m := nats.NewMsg(central.FleetSubject("S0001"))
		m.Data = body
		m.Header.Set(jetstream.SubjectHeader, central.FleetSubject("S0002"))
		m.Header.Set(jetstream.TimeStampHeaer, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
		m.Header.Set(jetstream.SequenceHeader, "999999999")
		m.Header.Set(jetstream.StreamHeader, central.FleetStreamName)
		if _, err := a.js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("store A writes its own key: %v", err)
		}
	}
	reflect := func(t *testing.T) {
		// ops asks for S0002's summary with S0001's key as the reply
		// subject: JetStream's answer is stored there.
		before := lastSeq(t, o.js)
		get := "$JS.API.DIRECT.GET." + central.FleetStreamName + "." + central.FleetSubject("S0002")
		if err := o.nc.PublishRequest(get, central.FleetSubject("S0001"), nil); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); lastSeq(t, o.js) == before; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("waited 20s for the reflected answer to be stored under S0001's key")
			}
		}
	}
	waitArchive(t, dial(t, h.URL(), admin), "S0002", 30)
	for _, tc := range []struct {
		name  string
		write func(*testing.T)
	}{{"a store's own key", forge}, {"a reflected answer", reflect}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.write(t)
			for _, who := range []struct {
				name string
				js   jetstream.JetStream
			}{{"ops", o.js}, {"the auditor", jsWithPrefix(t, au, central.AuditAPIPrefix)}} {
				entries, err := fleet.ReadWith(ctx, who.js)
				if err != nil {
					t.Fatalf("%s reads the fleet view: %v", who.name, err)
				}
				checkForgedView(t, who.name, fleet.Judge(entries, []string{"S0001", "S0002"}, time.Now(), fleet.Limits{Stale: time.Hour, Silent: 2 * time.Hour, MaxAge: time.Hour}))
			}
			ix := fleet.NewIndex(fleet.IndexOptions{Limits: fleet.Limits{Stale: time.Hour, Silent: 2 * time.Hour, MaxAge: time.Hour}, Roster: []fleet.RosterStore{{Store: "S0001"}, {Store: "S0002"}}})
			ictx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- ix.Run(ictx, o.js) }()
			defer func() { cancel(); <-done }()
			awaitIndex(t, ix, "S0001's record unverifiable", func(r fleet.Record) bool { return r.State == fleet.Unverifiable })
			if r, ok := ix.Get("S0002"); !ok || r.Summary == nil || r.Summary.HighestSeq != 40 {
				t.Errorf("index: S0002 = %+v, want its own summary (highest 40)", r)
			}
			rep, err := reconcile.Run(ctx, reconcile.Options{Conn: au.nc, APIPrefix: central.AuditAPIPrefix, Archives: central.ArchiveStreams(1), Stores: []string{"S0001", "S0002"}})
			if err != nil {
				t.Fatalf("reconcile as the auditor: %v", err)
			}
			for _, s := range rep.Stores {
				if s.Store == "S0002" && (s.Highest != 40 || s.Missing != 10) {
					t.Errorf("reconcile: S0002 highest %d, %d missing; want 40 and 10 (its own summary)", s.Highest, s.Missing)
				}
			}
			if rep.OK() {
				t.Error("reconcile is clean with S0002's ten movements lost")
			}
		})
	}
}

// checkForgedView checks one read of the fleet view: S0001 once and
// unverifiable, S0002 once with its own summary.
func checkForgedView(t *testing.T, who string, view []fleet.Store) {
	t.Helper()
	seen := map[string]int{}
	for _, s := range view {
		seen[s.Store]++
		switch {
		case s.Store == "S0001" && s.State != fleet.Unverifiable:
			t.Errorf("%s: S0001 is %s (%v), want unverifiable", who, s.State, s.Problems)
		case s.Store == "S0002" && (s.Summary == nil || s.Summary.HighestSeq != 40):
			t.Errorf("%s: S0002 = %+v, want its own summary (highest 40)", who, s)
		}
	}
	if seen["S0001"] != 1 || seen["S0002"] != 1 || len(view) != 2 {
		t.Errorf("%s: the view lists %v, want S0001 and S0002 once each", who, seen)
	}
}

// lastSeq is the fleet stream's last sequence.
func lastSeq(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(testContext(t), central.FleetStreamName)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// waitArchive waits until store's archive holds n messages.
func waitArchive(t *testing.T, ad *client, store string, n uint64) {
	t.Helper()
	arch, err := ad.js.Stream(testContext(t), archive(store, 1))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := arch.Info(testContext(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d messages after 20 s, want %d (awaited: the source copying them)", archive(store, 1), info.State.Msgs, n)
		}
	}
}
