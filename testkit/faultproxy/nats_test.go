package faultproxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/natstest"
)

func publish(ctx context.Context, js jetstream.JetStream, key string) (*jetstream.PubAck, error) {
	m := nats.NewMsg(central.Subject("S1", key))
	m.Header.Set(jetstream.MsgIDHeader, key)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m.Data = []byte(`{"qty":1}`)
	return js.PublishMsg(ctx, m)
}

// A publish that reached the stream while its ack was lost: the client
// sees a timeout, the stream holds the movement, and a resend is answered
// "already stored" (10071 on a single server), however often it happens.
func TestLostAckThroughNATS(t *testing.T) {
	s := natstest.StartHub(t)
	p := newProxy(t, s.Addr())

	disconnected := make(chan struct{}, 8)
	reconnected := make(chan struct{}, 8)
	nc := natstest.Connect(t, p.URL(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }),
	)
	js := natstest.JetStream(t, nc)
	// A second client straight to the server, to look at the stream.
	direct, err := natstest.JetStream(t, natstest.Connect(t, s.URL())).Stream(t.Context(), central.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}

	p.LoseAcks()
	for i, key := range []string{"k1", "k2"} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := publish(ctx, js, key)
		cancel()
		// nats.go does not fail a pending request when its connection
		// drops; the caller sees only its own deadline.
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("publish %s with its ack lost: error = %v, want context.DeadlineExceeded", key, err)
		}
		await(t, disconnected, "disconnect")
		await(t, reconnected, "reconnect")

		m, err := direct.GetLastMsgForSubject(t.Context(), central.Subject("S1", key))
		if err != nil {
			t.Fatalf("publish %s: not in the stream although it reached the server: %v", key, err)
		}
		if m.Sequence != uint64(i+1) {
			t.Errorf("%s stored at sequence %d, want %d", key, m.Sequence, i+1)
		}
		if s := p.Stats(); s.LostReplies != int64(i+1) {
			t.Errorf("LostReplies = %d, want %d", s.LostReplies, i+1)
		}
	}

	p.Pass()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = publish(ctx, js, "k1")
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Errorf("resend of k1: error = %v, want APIError 10071 (already stored)", err)
	}
	if _, err := publish(ctx, js, "k3"); err != nil {
		t.Errorf("publish k3 after Pass: %v", err)
	}
}

// A black hole stalls a connected client: its publish times out while the
// connection still looks up, until pings fail.
// A black hole stalls a connected client: its publish times out while the
// connection still looks up, until unanswered pings make the client drop
// it as stale.
func TestBlackholeThroughNATS(t *testing.T) {
	s := natstest.StartHub(t)
	p := newProxy(t, s.Addr())
	disconnected := make(chan error, 8)
	reconnected := make(chan struct{}, 8)
	nc := natstest.Connect(t, p.URL(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(200*time.Millisecond),
		nats.MaxPingsOutstanding(2),
		nats.Timeout(500*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { disconnected <- err }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }),
	)
	js := natstest.JetStream(t, nc)

	p.Blackhole()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err := publish(ctx, js, "k1")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("publish into a black hole: error = %v, want context.DeadlineExceeded", err)
	}
	select {
	case err := <-disconnected:
		if !errors.Is(err, nats.ErrStaleConnection) {
			t.Errorf("disconnect error = %v, want nats.ErrStaleConnection", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no disconnect within 10s of unanswered pings")
	}

	p.Pass()
	await(t, reconnected, "reconnect")
	if _, err := publish(t.Context(), js, "k2"); err != nil {
		t.Errorf("publish after the black hole: %v", err)
	}
}

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
	}
}
