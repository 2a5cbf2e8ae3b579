package hub_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/hub"
)

// startHub starts a hub on a free loopback port with a fresh store, stopped
// when the test ends.
func startHub(t *testing.T, o hub.Options) *hub.Hub {
	t.Helper()
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.StoreDir == "" {
		o.StoreDir = t.TempDir()
	}
	o.Provision = streams.Provision
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
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStart(t *testing.T) {
	tests := []struct {
		name     string
		opts     hub.Options
		wantSync bool
	}{
		{name: "durable by default", opts: hub.Options{}, wantSync: true},
		{name: "no sync for benchmarks", opts: hub.Options{NoSync: true}, wantSync: false},
		{name: "dev config file", opts: hub.Options{ConfigFile: filepath.Join("..", "configs", "nats", "hub-dev.conf")}, wantSync: true},
		{name: "dev config file with no sync", opts: hub.Options{ConfigFile: filepath.Join("..", "configs", "nats", "hub-dev.conf"), NoSync: true}, wantSync: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startHub(t, tc.opts)
			if got := h.Server().JetStreamConfig().SyncAlways; got != tc.wantSync {
				t.Errorf("SyncAlways = %v, want %v", got, tc.wantSync)
			}
			if got, want := h.Provisioned(), []string{"created stream RX_MOVEMENTS", "created stream RX_ARCHIVE", "created stream KV_RX_FLEET", "created stream RX_WITNESS"}; !slices.Equal(got, want) {
				t.Errorf("Provisioned() = %q, want %q", got, want)
			}
			if !strings.HasPrefix(h.URL(), "nats://127.0.0.1:") || strings.HasSuffix(h.URL(), ":0") {
				t.Errorf("URL() = %q, want nats://127.0.0.1:<chosen port>", h.URL())
			}
			_, js := connect(t, h.URL())
			s, err := js.Stream(testContext(t), central.StreamName)
			if err != nil {
				t.Fatalf("stream info: %v", err)
			}
			if got := s.CachedInfo().Config.Storage; got != jetstream.FileStorage {
				t.Errorf("storage = %v, want file", got)
			}
		})
	}
}

func TestStartFails(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		opts    hub.Options
		wantErr string
	}{
		{name: "no store dir", opts: hub.Options{Listen: "127.0.0.1:0"}, wantErr: "hub: start: no store directory given"},
		{name: "bad listen address", opts: hub.Options{Listen: "127.0.0.1", StoreDir: t.TempDir()}, wantErr: `hub: listen address "127.0.0.1"`},
		{name: "port in use", opts: hub.Options{Listen: busy.Addr().String(), StoreDir: t.TempDir()}, wantErr: "Error listening on port"},
		{name: "store dir is a file", opts: hub.Options{Listen: "127.0.0.1:0", StoreDir: notADir}, wantErr: "Can't start JetStream"},
		{name: "missing config file", opts: hub.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), ConfigFile: filepath.Join(t.TempDir(), "none.conf")}, wantErr: "hub: read config"},
		{name: "auth config without provisioning credentials",
			opts:    hub.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), ConfigFile: filepath.Join("..", "configs", "nats", "production.conf.template"), Provision: streams.Provision},
			wantErr: "Authorization Violation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			h, err := hub.Start(tc.opts)
			if err == nil {
				h.Shutdown()
				t.Fatalf("Start succeeded, want error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Start error = %q, want it to contain %q", err, tc.wantErr)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Start took %v to fail, want it to fail fast", d)
			}
		})
	}
}

func TestShutdownTwice(t *testing.T) {
	h := startHub(t, hub.Options{})
	nc, _ := connect(t, h.URL(), nats.NoReconnect())
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })

	h.Shutdown()
	h.Shutdown()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("client still connected 5s after Shutdown")
	}
}

func TestRestartKeepsStoredMovements(t *testing.T) {
	dir := t.TempDir()
	h := startHub(t, hub.Options{StoreDir: dir})
	_, js := connect(t, h.URL())
	subj := central.Subject("S1", "k1")
	if _, err := js.Publish(testContext(t), subj, []byte(`{}`)); err != nil {
		t.Fatalf("publish: %v", err)
	}
	h.Shutdown()

	h2 := startHub(t, hub.Options{StoreDir: dir})
	if got := h2.Provisioned(); len(got) != 0 {
		t.Errorf("Provisioned() after restart = %q, want nothing", got)
	}
	_, js2 := connect(t, h2.URL())
	s, err := js2.Stream(testContext(t), central.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if _, err := s.GetLastMsgForSubject(testContext(t), subj); err != nil {
		t.Errorf("get %s after restart: %v", subj, err)
	}
}
