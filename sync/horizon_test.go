package sync

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/natstest"
)

// The dedupe horizon of TestDedupeHorizon's central: the movement stream's
// max_age. Long enough for an agent on a busy machine to resend inside it,
// short enough to wait out.
const (
	testHorizon = 6 * time.Second
	testWindow  = 500 * time.Millisecond // the Nats-Msg-Id window, inside the horizon
)

// TestDedupeHorizon shows what central's dedupe horizon (the movement
// stream's max_age) means end to end, with a real agent and a
// one-partition central with its archive:
//
//   - (a) an agent that lost the acknowledgement resends a movement
//     inside the horizon: central refuses it, the agent finds its own
//     digest in central's copy and marks it synced; the archive holds it
//     once;
//   - (b) the same movement resent after the stream dropped it is stored
//     again and archived a second time with the same digest: a repeat
//     for the reconciliation;
//   - (c) another payload under a key the stream dropped is stored and
//     archived too: a conflict for the reconciliation.
//
// The earlier attempts of (a) and (b) were sent in the full form, by the
// version before the compact headers: the agent reads its digest from
// either form, and the archive then holds both.
//
// Time passes only where the server must expire a message, and the test
// polls the stream for that.
func TestDedupeHorizon(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	so := central.StreamOptions{MaxAge: testHorizon, DuplicateWindow: testWindow}
	for _, cfg := range []jetstream.StreamConfig{central.StreamConfig(so), central.ArchiveConfig(so)} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatalf("create %s: %v", cfg.Name, err)
		}
	}
	stream, err := js.Stream(ctx, central.StreamName)
	if err != nil {
		t.Fatal(err)
	}

	// Two stores' agents, stopped: one resends inside the horizon, the
	// other after it.
	inside := startRig(t, testOptions(t, srv.URL()), nil)
	inside.stop()
	oOut := testOptions(t, srv.URL())
	oOut.StoreID = "S0002"
	outside := startRig(t, oOut, nil)
	outside.stop()

	a := inside.enqueue(0, 1)[0]
	bc := outside.enqueue(0, 2)
	b, c := bc[0], bc[1]
	// What central stored from each movement's earlier attempt, whose
	// acknowledgement the agent lost: the agent's own message for a and b;
	// for c, another movement under c's key.
	earlier := map[string]uint64{}
	for _, x := range []struct {
		r   *rig
		p   movement.Prepared
		msg *nats.Msg
		// full: an agent of a version before the compact headers sent it.
		full bool
	}{
		{inside, a, nil, true},
		{outside, b, nil, true},
		{outside, c, central.Message{Store: "S0002", Key: c.KeyString(), Digest: hex.EncodeToString(make([]byte, 32)),
			Seq: 99, EnqueuedAt: time.Now(), Payload: []byte(`{"movement_id":"M000001","note":"an earlier version"}`)}.Msg(), false},
	} {
		msg := x.msg
		if msg == nil {
			e, err := x.r.q.Get(x.p.Key)
			if err != nil {
				t.Fatal(err)
			}
			msg = message(x.r.opts.StoreID, queue.Lineage{}, e.Record, false)
			if x.full {
				msg = natstest.FullForm(movementOf(x.r.opts.StoreID, queue.Lineage{}, e.Record, false), e.Record.Schedule)
			}
		}
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		earlier[x.p.KeyString()] = ack.Sequence
	}

	// (a) Inside the horizon.
	inside.start()
	inside.waitSynced(1, 20*time.Second)
	ea, err := inside.q.Get(a.Key)
	if err != nil {
		t.Fatal(err)
	}
	if ea.StreamSeq != earlier[a.KeyString()] {
		t.Fatalf("(a) synced as central's sequence %d, want the earlier copy's %d: was the horizon (%s) over before the agent resent?",
			ea.StreamSeq, earlier[a.KeyString()], testHorizon)
	}
	if !strings.Contains(inside.logs.String(), `"outcome":"already_stored"`) {
		t.Errorf("(a) not settled as already stored:\n%s", inside.logs.Tail(20))
	}

	// Outside the horizon: the server expires b's and c's earlier copies.
	for _, p := range []movement.Prepared{b, c} {
		subject := central.Subject("S0002", p.KeyString())
		deadline := time.Now().Add(testHorizon + 30*time.Second)
		for {
			_, err := stream.GetLastMsgForSubject(ctx, subject)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server did not expire %s's message within the horizon (%s) and 30s", subject, testHorizon)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	outside.start()
	outside.waitSynced(2, 20*time.Second)
	for _, p := range []movement.Prepared{b, c} {
		e, err := outside.q.Get(p.Key)
		if err != nil {
			t.Fatal(err)
		}
		if e.StreamSeq <= earlier[p.KeyString()] {
			t.Errorf("key %s synced as central's sequence %d, want a new message after the earlier %d", p.KeyString(), e.StreamSeq, earlier[p.KeyString()])
		}
	}

	// The archive: a once; b twice with one digest (a repeat); c twice
	// with two (a conflict).
	digests := archived(t, js, 5)
	want := map[string][]string{
		a.KeyString(): {hex.EncodeToString(a.Digest[:])},
		b.KeyString(): {hex.EncodeToString(b.Digest[:]), hex.EncodeToString(b.Digest[:])},
		c.KeyString(): {hex.EncodeToString(make([]byte, 32)), hex.EncodeToString(c.Digest[:])},
	}
	for k, w := range want {
		got := digests[k]
		if len(got) != len(w) || got[0] != w[0] || got[len(got)-1] != w[len(w)-1] {
			t.Errorf("the archive holds key %s with digests %v, want %v", k, got, w)
		}
	}
	if len(digests) != len(want) {
		t.Errorf("the archive holds %d keys, want %d", len(digests), len(want))
	}
}

// archived polls the archive until it holds n messages with nothing left
// to source, then returns the digests of each key in archive order.
func archived(t *testing.T, js jetstream.JetStream, n uint64) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	var s jetstream.Stream
	for {
		var err error
		s, err = js.Stream(ctx, central.ArchiveStreamName)
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		lag := len(info.Sources) == 0 || info.Sources[0].Lag > 0
		if info.State.Msgs == n && !lag {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archive holds %d messages (source %+v) after 20s, want %d", info.State.Msgs, info.Sources, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := map[string][]string{}
	for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("archive message %d: %v", seq, err)
		}
		k := central.KeyOfMsgID(m.Header.Get(central.HeaderMsgID))
		out[k] = append(out[k], central.DigestOf(m.Header))
	}
	return out
}
