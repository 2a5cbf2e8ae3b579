package provision_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/testkit/natstest"
)

// startHub starts a hub with central's streams provisioned (o.Stream) on a
// free loopback port with a fresh store, stopped when the test ends.
func startHub(t *testing.T, o hub.Options) *hub.Hub {
	t.Helper()
	o.Provision = streams.Provision
	return startBareHub(t, o)
}

// startBareHub is startHub without the streams.
func startBareHub(t *testing.T, o hub.Options) *hub.Hub {
	t.Helper()
	o.Listen = "127.0.0.1:0"
	if o.StoreDir == "" {
		o.StoreDir = t.TempDir()
	}
	h, err := hub.Start(o)
	if err != nil {
		t.Fatalf("start hub: %v", err)
	}
	t.Cleanup(h.Shutdown)
	return h
}

// connect opens a client connection to url, closed when the test ends.
func connect(t *testing.T, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := natstest.Connect(t, url, opts...)
	return nc, natstest.JetStream(t, nc)
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
