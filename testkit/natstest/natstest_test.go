package natstest_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/natstest"
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// publish sends a movement with the agent's headers.
func publish(ctx context.Context, js jetstream.JetStream, key string) (*jetstream.PubAck, error) {
	m := nats.NewMsg(central.Subject("S1", key))
	m.Header.Set(jetstream.MsgIDHeader, key)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m.Data = []byte(`{}`)
	return js.PublishMsg(ctx, m)
}

// events turns a connection's disconnects and reconnects into channels.
type events struct {
	disconnected chan struct{}
	reconnected  chan struct{}
}

func watch(nc *nats.Conn) *events {
	e := &events{disconnected: make(chan struct{}, 16), reconnected: make(chan struct{}, 16)}
	nc.SetDisconnectErrHandler(func(*nats.Conn, error) { e.disconnected <- struct{}{} })
	nc.SetReconnectHandler(func(*nats.Conn) { e.reconnected <- struct{}{} })
	return e
}

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
	}
}

// agentOptions are the connection options DESIGN §6 gives the agent:
// reconnect for ever, quickly here, and no in-memory reconnect buffer.
var agentOptions = []nats.Option{
	nats.MaxReconnects(-1),
	nats.ReconnectWait(50 * time.Millisecond),
	nats.ReconnectJitter(0, 0),
	nats.ReconnectBufSize(-1),
}

func TestStartHub(t *testing.T) {
	s := natstest.StartHub(t)
	if !strings.HasPrefix(s.URL(), "nats://127.0.0.1:") {
		t.Errorf("URL() = %q, want a loopback URL", s.URL())
	}
	if s.Hub() == nil || !s.Hub().Server().JetStreamConfig().SyncAlways {
		t.Error("hub is not running with SyncAlways")
	}
	js := natstest.JetStream(t, natstest.Connect(t, s.URL()))
	if _, err := publish(testContext(t), js, "k1"); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func TestRestartKeepsPortAndStore(t *testing.T) {
	s := natstest.StartHub(t)
	url, dir := s.URL(), s.StoreDir()
	nc := natstest.Connect(t, s.URL(), agentOptions...)
	ev := watch(nc)
	js := natstest.JetStream(t, nc)
	if _, err := publish(testContext(t), js, "before"); err != nil {
		t.Fatalf("publish before restart: %v", err)
	}

	s.Restart(t)
	await(t, ev.disconnected, "disconnect")
	await(t, ev.reconnected, "reconnect")
	if s.URL() != url || s.StoreDir() != dir {
		t.Errorf("after restart URL %q store %q, want %q %q", s.URL(), s.StoreDir(), url, dir)
	}
	stream, err := js.Stream(testContext(t), central.StreamName)
	if err != nil {
		t.Fatalf("stream info after restart: %v", err)
	}
	if _, err := stream.GetLastMsgForSubject(testContext(t), central.Subject("S1", "before")); err != nil {
		t.Errorf("movement published before the restart: %v", err)
	}
	if _, err := publish(testContext(t), js, "after"); err != nil {
		t.Errorf("publish after restart: %v", err)
	}
}

func TestStopAndStart(t *testing.T) {
	s := natstest.StartHub(t)
	nc := natstest.Connect(t, s.URL(), agentOptions...)
	ev := watch(nc)
	js := natstest.JetStream(t, nc)

	s.Stop()
	s.Stop() // stopping a stopped server does nothing
	await(t, ev.disconnected, "disconnect")
	if s.Hub() != nil {
		t.Error("Hub() is not nil while stopped")
	}
	// With no reconnect buffer, a publish while disconnected fails at once.
	_, err := publish(testContext(t), js, "offline")
	if !errors.Is(err, nats.ErrReconnectBufExceeded) {
		t.Errorf("publish while central is down: error = %v, want nats.ErrReconnectBufExceeded", err)
	}

	s.Start(t)
	await(t, ev.reconnected, "reconnect")
	if _, err := publish(testContext(t), js, "online"); err != nil {
		t.Errorf("publish after start: %v", err)
	}
}

func TestOptions(t *testing.T) {
	s := natstest.StartHub(t,
		natstest.WithMaxPayload(2048),
		natstest.WithStream(central.StreamOptions{MaxMsgs: 5, DuplicateWindow: time.Second}),
	)
	nc := natstest.Connect(t, s.URL())
	if got := nc.MaxPayload(); got != 2048 {
		t.Errorf("MaxPayload = %d, want 2048", got)
	}
	stream, err := natstest.JetStream(t, nc).Stream(testContext(t), central.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	cfg := stream.CachedInfo().Config
	if cfg.MaxMsgs != 5 || cfg.Duplicates != time.Second {
		t.Errorf("stream MaxMsgs %d Duplicates %v, want 5 and 1s", cfg.MaxMsgs, cfg.Duplicates)
	}
}

func TestWithConfigFile(t *testing.T) {
	s := natstest.StartHub(t, natstest.WithConfigFile(
		filepath.Join("..", "..", "configs", "nats", "production.conf.template"),
		nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin"),
	))
	denied := make(chan error, 1)
	nc := natstest.Connect(t, s.URL(), nats.UserInfo("S0001", "CHANGE-ME-S0001"), nats.CustomInboxPrefix("_INBOX_S0001"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case denied <- err:
			default:
			}
		}))
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := publish(ctx, natstest.JetStream(t, nc), "k1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("store S0001 publishes to rx.mv.S1: error = %v, want a timeout (permission denied)", err)
	}
	select {
	case err := <-denied:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("async error = %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("no permissions violation reported within 5s")
	}
	m := nats.NewMsg(central.Subject("S0001", "k1"))
	m.Header.Set(jetstream.MsgIDHeader, "k1")
	if _, err := natstest.JetStream(t, nc).PublishMsg(testContext(t), m); err != nil {
		t.Errorf("store S0001 publishes its movement: %v", err)
	}
	s.Restart(t)
}
