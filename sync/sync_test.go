package sync

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/faultproxy"
	"github.com/rxedge/agent/testkit/natstest"
)

func TestDeliversWithHeaders(t *testing.T) {
	srv := natstest.StartHub(t)
	r := startRig(t, testOptions(t, srv.URL()), nil)
	before := time.Now().Truncate(time.Microsecond)
	items := r.enqueue(0, 10)
	after := time.Now()
	r.waitSynced(10, 20*time.Second)
	exactlyOnce(t, srv.URL(), 10)

	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	ctx := context.Background()
	s, err := js.Stream(ctx, central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	p := items[7] // a controlled one
	m, err := s.GetLastMsgForSubject(ctx, central.Subject(testStore, p.KeyString()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Nats-Msg-Id": p.KeyString() + "-" + hex.EncodeToString(p.Digest[:]), "Nats-Expected-Last-Subject-Sequence": "0",
		"Rx-Seq": "8", "Rx-File": r.q.Lineage().FileID,
	}
	if at, ok := central.EnqueuedAtOf(m.Header); !ok || at.Before(before) || at.After(after) || strings.ContainsAny(m.Header.Get("Rx-Enqueued-At"), "-:") {
		t.Errorf("Rx-Enqueued-At %q (%v), want unix microseconds between %v and %v", m.Header.Get("Rx-Enqueued-At"), at, before, after)
	}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	// The compact form: the store is the subject's, the schedule the
	// payload's, the digest the message id's.
	for _, k := range []string{"Rx-Digest", "Rx-Store", "Rx-Schedule"} {
		if v, ok := m.Header[k]; ok {
			t.Errorf("header %s = %q sent", k, v)
		}
	}
	if string(m.Data) != string(p.Payload) {
		t.Errorf("stored message %v / %s", m.Header, m.Data)
	}
	e, _ := r.q.Get(p.Key)
	if e.State != queue.Synced || e.StreamSeq != m.Sequence {
		t.Errorf("local entry %+v, central sequence %d", e, m.Sequence)
	}
	if c := r.e.Connection(); c.State != status.Online || c.LastSyncAt == nil {
		t.Errorf("connection = %+v", c)
	}
}

func TestStartsWithNoServerThenDelivers(t *testing.T) {
	srv := natstest.StartHub(t)
	url := srv.URL()
	srv.Stop()
	r := startRig(t, testOptions(t, url), nil)
	r.enqueue(0, 1000)
	time.Sleep(500 * time.Millisecond)
	if s := r.stats(); s.Count(queue.Pending) != 1000 {
		t.Fatalf("pending = %d with no server, want 1000", s.Count(queue.Pending))
	}
	if c := r.e.Connection(); c.State != status.Offline {
		t.Fatalf("state with no server = %s, want offline", c.State)
	}
	srv.Start(t)
	r.waitSynced(1000, 30*time.Second)
	exactlyOnce(t, url, 1000)
	noAttemptsCharged(t, r.q)
}

func TestServerRestartMidDrain(t *testing.T) {
	for _, tc := range []struct {
		name string
		tune func(*Options)
	}{
		{"trickle", func(o *Options) { o.NoBatch = true }},
		{"batch", func(o *Options) { o.BatchSize = 100 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.StartHub(t)
			r := startRig(t, testOptions(t, srv.URL()), tc.tune)
			const n = 10000
			r.enqueue(0, n)
			s := r.waitFor("the drain to start", 30*time.Second, func(s queue.Stats) bool { return s.Count(queue.Synced) >= 500 })
			srv.Stop()
			if s.Count(queue.Synced) == n {
				t.Fatal("the drain finished before the server was stopped")
			}
			time.Sleep(300 * time.Millisecond)
			srv.Start(t)
			r.waitSynced(n, 60*time.Second)
			exactlyOnce(t, srv.URL(), n)
			if q := r.stats().Count(queue.Quarantined); q != 0 {
				t.Fatalf("%d quarantined", q)
			}
		})
	}
}

func TestLostAcks(t *testing.T) {
	for _, tc := range []struct {
		name string
		tune func(*Options)
		lose func(*faultproxy.Proxy)
	}{
		// Single publishes: each publish's ack.
		{"trickle", func(o *Options) { o.NoBatch = true }, (*faultproxy.Proxy).LoseAcks},
		// Atomic batches: the commit's ack (the only reply that holds the
		// batch's count), after the whole batch was stored.
		{"batch", func(o *Options) { o.BatchSize = 500 }, func(p *faultproxy.Proxy) {
			p.LoseReplies([]byte("PUB "), []byte(`"count":`))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.StartHub(t)
			px, err := faultproxy.New(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			// Publishes reach central, their acks are lost and the
			// connection is cut, over and over.
			tc.lose(px)
			r := startRig(t, testOptions(t, px.URL()), tc.tune)
			const n = 5000
			r.enqueue(0, n)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := px.Wait(ctx, func(s faultproxy.Stats) bool { return s.LostReplies >= 3 }); err != nil {
				t.Fatalf("acks were not lost: %v (%+v)", err, px.Stats())
			}
			stored, _ := centralCounts(t, srv.URL())
			synced := r.stats().Count(queue.Synced)
			if stored <= synced {
				t.Fatalf("central holds %d, the agent counted %d synced: no stored movement had its ack lost", stored, synced)
			}
			t.Logf("%d acks lost; central held %d movements, %d known to the agent, before the network healed", px.Stats().LostReplies, stored, synced)
			px.Pass()
			r.waitSynced(n, 60*time.Second)
			exactlyOnce(t, srv.URL(), n)
			noAttemptsCharged(t, r.q)
		})
	}
}

func TestOfflineLongerThanDuplicateWindow(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithStream(central.StreamOptions{DuplicateWindow: time.Second}))
	px, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	r := startRig(t, testOptions(t, px.URL()), func(o *Options) { o.NoBatch = true })
	r.enqueue(0, 300)
	// Unknown outcomes: stored centrally, acknowledgements lost...
	px.LoseAcks()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := px.Wait(ctx, func(s faultproxy.Stats) bool { return s.LostReplies >= 1 }); err != nil {
		t.Fatal(err)
	}
	// ...then offline for several duplicate windows.
	px.Refuse()
	px.Cut()
	time.Sleep(3 * time.Second)
	px.Pass()
	r.waitSynced(300, 30*time.Second)
	exactlyOnce(t, srv.URL(), 300)
}

func TestConflictIsQuarantinedOthersDelivered(t *testing.T) {
	srv := natstest.StartHub(t)
	r := startRig(t, testOptions(t, srv.URL()), nil)
	r.stop()
	items := r.enqueue(0, 10)

	// Central already holds M000005's key with another digest.
	victim := items[5]
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	m := nats.NewMsg(central.Subject(testStore, victim.KeyString()))
	m.Header.Set("Nats-Msg-Id", victim.KeyString())
	m.Header.Set("Rx-Digest", strings.Repeat("0", 64))
	m.Data = []byte(`{"movement_id":"M000005","note":"another movement"}`)
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}

	r.start()
	r.waitFor("9 synced and 1 quarantined", 20*time.Second, func(s queue.Stats) bool {
		return s.Count(queue.Synced) == 9 && s.Count(queue.Quarantined) == 1
	})
	e, _ := r.q.Get(victim.Key)
	if e.State != queue.Quarantined || e.Record.Quarantine.Reason != "permanent:conflict" {
		t.Fatalf("victim: %+v %+v", e, e.Record)
	}
	exactlyOnce(t, srv.URL(), 10)
}

func TestTooLargeQuarantinedAfterOneAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		tune func(*Options)
	}{
		{"trickle", func(o *Options) { o.NoBatch = true }},
		{"batch", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.StartHub(t, natstest.WithMaxPayload(1024))
			r := startRig(t, testOptions(t, srv.URL()), tc.tune)
			r.stop()
			big := r.prepare(movementJSON("BIG", `,"note":"`+strings.Repeat("x", 1000)+`","lot":"`+strings.Repeat("L", 60)+`","rx_ref":"`+strings.Repeat("r", 120)+`"`))
			big2 := r.prepare(movementJSON("BIG2", `,"note":"`+strings.Repeat("y", 1020)+`","rx_ref":"`+strings.Repeat("r", 120)+`"`))
			if len(big.Payload) <= 1024 || len(big2.Payload) <= 1024 {
				t.Fatalf("payloads of %d and %d bytes fit the server's limit", len(big.Payload), len(big2.Payload))
			}
			if _, err := r.q.Enqueue([]movement.Prepared{big, big2}); err != nil {
				t.Fatal(err)
			}
			r.enqueue(0, 200)
			r.start()
			r.waitFor("200 synced, 2 quarantined", 20*time.Second, func(s queue.Stats) bool {
				return s.Count(queue.Synced) == 200 && s.Count(queue.Quarantined) == 2
			})
			e, _ := r.q.Get(big.Key)
			if e.State != queue.Quarantined || e.Record.Quarantine.Reason != "permanent:too_large" || e.Record.Attempts != 1 {
				t.Fatalf("big: %+v / %+v", e, e.Record)
			}
			exactlyOnce(t, srv.URL(), 200)
		})
	}
}
