package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
)

// DefaultListen is where a hub listens when Options.Listen is empty:
// loopback only, the standard NATS port.
const DefaultListen = "127.0.0.1:4222"

// DefaultStartTimeout bounds how long Start waits for the server to be
// ready and the stream to be provisioned.
const DefaultStartTimeout = 30 * time.Second

// Options configure a hub. The zero value plus a StoreDir is a durable hub
// on 127.0.0.1:4222 with no streams; Provision creates them.
type Options struct {
	// Listen is the client address, host:port. Port 0 picks a free port;
	// URL and Addr then tell which. Empty means the ConfigFile's listen
	// address when it has one, DefaultListen otherwise.
	Listen string
	// StoreDir is the JetStream directory. Required: a hub always keeps its
	// stream on disk. It overrides any store_dir in ConfigFile.
	StoreDir string
	// NoSync turns off the fsync of every acknowledged write (JetStream
	// sync_interval "always"), leaving the server's default of syncing every
	// two minutes. Only benchmarks measuring the cost of durability set it.
	NoSync bool
	// MaxPayload is the largest message the server accepts; 0 keeps the
	// server's (or ConfigFile's) value, 1 MiB by default.
	MaxPayload int32
	// ServerName names the server in logs and cluster views; empty keeps
	// ConfigFile's or the server's generated one.
	ServerName string
	// ConfigFile is an optional nats-server configuration file, such as
	// configs/nats/production.conf.template, read before the fields above
	// are applied over it.
	ConfigFile string
	// Stream sets the streams' deployment settings, the number of
	// partitions among them; see central.StreamOptions. They are given to
	// Provision.
	Stream central.StreamOptions
	// Provision, when set, is called once the server accepts clients, over
	// a connection of the hub's own, to create or update central's streams
	// (central/streams' Provision does); nil only starts the server.
	Provision func(context.Context, jetstream.JetStream, central.StreamOptions) ([]string, error)
	// ConnectOptions are given to the hub's own connection (to URL) that
	// provisions the streams. A ConfigFile with authorization needs
	// credentials here of a user that may create and update them, e.g.
	// nats.UserInfo("admin", password).
	ConnectOptions []nats.Option
	// Logger receives the server's log; nil keeps the server quiet. Fatal
	// messages are passed on as errors: they make Start fail, never exit
	// the process.
	Logger server.Logger
	// StartTimeout bounds Start; 0 means DefaultStartTimeout.
	StartTimeout time.Duration
	// Configure, when set, gets the final server options before the server
	// is created, for settings Options does not cover (a test cluster's
	// routes, for one).
	Configure func(*server.Options)
}

// Hub is a running embedded server. Its methods are safe for concurrent use.
type Hub struct {
	srv         *server.Server
	addr        string
	provisioned []string
	stop        sync.Once
}

// Start starts the server, waits until it accepts clients and, when
// Options.Provision is set, has it create or update central's streams.
// On error nothing is left running.
func Start(o Options) (*Hub, error) {
	if o.StoreDir == "" {
		return nil, errors.New("hub: start: no store directory given")
	}
	so, err := serverOptions(o)
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("hub: start server: %w", err)
	}
	timeout := o.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	deadline := time.Now().Add(timeout)

	lg := newLogger(o.Logger)
	srv.SetLogger(lg, false, false)
	srv.Start()
	if err := waitReady(srv, lg, deadline); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		where := o.Listen
		if where == "" {
			where = net.JoinHostPort(so.Host, strconv.Itoa(so.Port))
		}
		return nil, fmt.Errorf("hub: start server on %s: %w", where, err)
	}
	h := &Hub{srv: srv, addr: clientAddr(srv, so.Host)}
	if o.Provision == nil {
		return h, nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	h.provisioned, err = h.provision(ctx, o)
	if err != nil {
		h.Shutdown()
		return nil, err
	}
	return h, nil
}

// serverOptions turns Options into the server's, over ConfigFile if given.
func serverOptions(o Options) (*server.Options, error) {
	so := &server.Options{}
	fromFile := false
	if o.ConfigFile != "" {
		var err error
		so, err = server.ProcessConfigFile(o.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("hub: read config %s: %w", o.ConfigFile, err)
		}
		fromFile = so.Port != 0
	}
	listen := o.Listen
	if listen == "" && !fromFile {
		listen = DefaultListen
	}
	if listen != "" {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("hub: listen address %q: %w", listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return nil, fmt.Errorf("hub: listen address %q: bad port", listen)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		so.Host, so.Port = host, p
	}
	so.JetStream = true
	so.StoreDir = o.StoreDir
	so.SyncAlways = !o.NoSync
	if o.MaxPayload > 0 {
		so.MaxPayload = o.MaxPayload
	}
	if o.ServerName != "" {
		so.ServerName = o.ServerName
	}
	// An embedded server must not take over the process's signals.
	so.NoSigs = true
	if o.Configure != nil {
		o.Configure(so)
	}
	return so, nil
}

// waitReady waits until srv accepts clients, failing early when the server
// reported a fatal error (a port in use, a store it cannot open).
func waitReady(srv *server.Server, lg *logger, deadline time.Time) error {
	for {
		if err := lg.fatal(); err != nil {
			return err
		}
		// Each call checks, sleeps 25 ms, and checks again.
		if srv.ReadyForConnections(30 * time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("not ready for connections before the start timeout")
		}
	}
	if err := lg.fatal(); err != nil {
		return err
	}
	if !srv.JetStreamEnabled() {
		return errors.New("jetstream is not enabled")
	}
	return nil
}

// clientAddr is the address a client on this machine dials: the listener's
// port on the configured host, or on loopback when the server listens on
// every interface.
func clientAddr(srv *server.Server, host string) string {
	port := 0
	if a, ok := srv.Addr().(*net.TCPAddr); ok {
		port = a.Port
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func (h *Hub) provision(ctx context.Context, o Options) ([]string, error) {
	// Over the listener, not nats.InProcessServer: an in-process connection
	// refused by authorization reports only a closed pipe, after a timeout.
	copts := append([]nats.Option{nats.Name("rxedge hub provisioning"), nats.NoReconnect()}, o.ConnectOptions...)
	nc, err := nats.Connect(h.URL(), copts...)
	if err != nil {
		return nil, fmt.Errorf("hub: connect to provision the streams (a config with authorization needs Options.ConnectOptions with credentials that may manage streams): %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("hub: provision the streams: %w", err)
	}
	return o.Provision(ctx, js, o.Stream)
}

// URL is the client URL, "nats://host:port".
func (h *Hub) URL() string { return "nats://" + h.addr }

// Addr is the client address, "host:port".
func (h *Hub) Addr() string { return h.addr }

// Server is the embedded server, for what this package does not wrap.
func (h *Hub) Server() *server.Server { return h.srv }

// Provisioned is what Start changed on the streams, as Options.Provision
// reports it; empty when they were already as wanted or it was not set.
func (h *Hub) Provisioned() []string { return h.provisioned }

// Shutdown stops the server at once, closing every client connection, and
// returns when it has stopped and released its store. It is safe to call
// more than once.
func (h *Hub) Shutdown() {
	h.stop.Do(func() {
		h.srv.Shutdown()
		h.srv.WaitForShutdown()
	})
}
