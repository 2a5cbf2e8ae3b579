// Package natstest starts real NATS servers for other packages' tests: a
// hub (one embedded nats-server, JetStream on disk, central's streams
// provisioned) on a free loopback port, and a JetStream cluster with
// central's streams replicated on three nodes, for one partition or
// several, optionally under a configuration file such as the generated
// production one.
//
// Its promise: every server listens on loopback only, keeps its store in
// the test's temporary directory, fsyncs every acknowledged write like
// production, and is stopped when the test ends. A stopped server comes
// back on the same port with the same store, so clients reconnect to it the
// way agents reconnect to central after an outage.
package natstest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/hub"
)

// Option changes the hub.Options a server starts with.
type Option func(*hub.Options)

// WithStream sets the stream's options, e.g. a small MaxMsgs to fill it or
// a short DuplicateWindow.
func WithStream(so central.StreamOptions) Option {
	return func(o *hub.Options) { o.Stream = so }
}

// WithSkipProvision starts the server without central's streams, for a
// test that creates its own.
func WithSkipProvision() Option {
	return func(o *hub.Options) { o.Provision = nil }
}

// WithMaxPayload sets the server's max_payload.
func WithMaxPayload(n int32) Option {
	return func(o *hub.Options) { o.MaxPayload = n }
}

// WithConfigFile loads a nats-server configuration file, such as the
// production permissions template; connect gives the credentials the hub
// provisions the stream with (see hub.Options.ConnectOptions).
func WithConfigFile(path string, connect ...nats.Option) Option {
	return func(o *hub.Options) {
		o.ConfigFile = path
		o.ConnectOptions = connect
	}
}

// restartTimeout bounds how long a restart waits for its old port, which
// another process may hold for a moment.
const restartTimeout = 5 * time.Second

// Server is a hub that a test can stop and start again. Its methods are
// safe for concurrent use, except that Start and Restart must be called
// from the test's goroutine.
type Server struct {
	mu   sync.Mutex
	opts hub.Options // Listen holds the port chosen at the first start
	h    *hub.Hub
}

// StartHub starts a hub on a free loopback port with a store in a new
// temporary directory. It is stopped when the test ends.
func StartHub(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	o := hub.Options{Listen: "127.0.0.1:0", StoreDir: tb.TempDir(), Provision: streams.Provision}
	for _, f := range opts {
		f(&o)
	}
	s := &Server{opts: o}
	tb.Cleanup(s.Stop)
	s.Start(tb)
	return s
}

// Start starts the stopped server again, on the same port and store.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h != nil {
		tb.Fatalf("natstest: start hub on %s: already running", s.opts.Listen)
	}
	h, err := startRetrying(s.opts)
	if err != nil {
		tb.Fatalf("natstest: start hub: %v", err)
	}
	s.h = h
	s.opts.Listen = h.Addr()
}

// startRetrying starts a hub, retrying for a few seconds while its fixed
// port is still taken.
func startRetrying(o hub.Options) (*hub.Hub, error) {
	deadline := time.Now().Add(restartTimeout)
	for {
		h, err := hub.Start(o)
		if err == nil || strings.HasSuffix(o.Listen, ":0") || time.Now().After(deadline) {
			return h, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the server at once, closing every client connection, as if
// central went away. It does nothing when the server is stopped.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h != nil {
		s.h.Shutdown()
		s.h = nil
	}
}

// Restart stops the server and starts it again on the same port and store.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop()
	s.Start(tb)
}

// URL is the client URL, the same across restarts.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "nats://" + s.opts.Listen
}

// Addr is the client address, host:port, the same across restarts.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.Listen
}

// StoreDir is the JetStream directory, kept across restarts.
func (s *Server) StoreDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.StoreDir
}

// Hub is the running hub, nil while stopped.
func (s *Server) Hub() *hub.Hub {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h
}

// Connect opens a client connection to url (one URL or several, comma
// separated), closed when the test ends.
func Connect(tb testing.TB, url string, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		tb.Fatalf("natstest: connect to %s: %v", url, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on nc.
func JetStream(tb testing.TB, nc *nats.Conn) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("natstest: jetstream: %v", err)
	}
	return js
}

// RestartWith stops the server, changes its options, and starts it
// again on the same port and store: central reconfigured, e.g. its
// payload limit raised (WithMaxPayload).
func (s *Server) RestartWith(tb testing.TB, opts ...Option) {
	tb.Helper()
	s.Stop()
	s.mu.Lock()
	for _, f := range opts {
		f(&s.opts)
	}
	s.mu.Unlock()
	s.Start(tb)
}
