package sync

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestAliveIsAnsweredAndStoresNothing pins the liveness probe against real
// servers: the dev hub, and the production template as a store (whose
// permissions must allow it, and whose async errors must stay silent).
// Central answers it, stores nothing, and a server that is gone does not
// answer.
func TestAliveIsAnsweredAndStoresNothing(t *testing.T) {
	production := filepath.Join("..", "configs", "nats", "production.conf.template")
	for _, tc := range []struct {
		name string
		opts []natstest.Option
		conn []nats.Option
	}{
		{"dev hub", nil, nil},
		{"production template", []natstest.Option{natstest.WithConfigFile(production,
			nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin"))},
			[]nats.Option{nats.UserInfo("S0001", "CHANGE-ME-S0001"), nats.CustomInboxPrefix(central.InboxPrefix("S0001"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.StartHub(t, tc.opts...)
			asyncErrs := make(chan error, 8)
			conn := append(tc.conn, nats.ReconnectBufSize(-1), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				asyncErrs <- err
			}))
			nc := natstest.Connect(t, srv.URL(), conn...)
			tr, err := newJSTransport(nc, 16, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := tr.alive(ctx, "S0001")
				cancel()
				if err != nil {
					t.Fatalf("alive: %v, want central's answer", err)
				}
			}
			select {
			case err := <-asyncErrs:
				t.Fatalf("async error: %v", err)
			default:
			}
			admin := []nats.Option{}
			if tc.conn != nil {
				admin = []nats.Option{nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")}
			}
			anc := natstest.Connect(t, srv.URL(), admin...)
			s, err := natstest.JetStream(t, anc).Stream(context.Background(), central.StreamName)
			if err != nil {
				t.Fatal(err)
			}
			if info, err := s.Info(context.Background()); err != nil || info.State.Msgs != 0 {
				t.Fatalf("after three probes the stream holds %+v (%v), want nothing", info.State, err)
			}

			srv.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := tr.alive(ctx, "S0001"); err == nil {
				t.Fatal("alive answered with the server stopped")
			}
		})
	}
}
