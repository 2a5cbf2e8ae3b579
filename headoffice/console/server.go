package console

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/internal/listen"
	"github.com/rxedge/agent/internal/tally"
)

// Defaults of Options.
const (
	DefaultListen          = "127.0.0.1:7480"
	DefaultProxyHeader     = "X-Forwarded-User"
	DefaultSessionTTL      = 8 * time.Hour
	DefaultLoginTTL        = 5 * time.Minute
	DefaultCommandTimeout  = 15 * time.Second
	DefaultBulkConcurrency = 8
	DefaultBulkSpread      = 10 * time.Minute
	DefaultBulkDeadline    = 90 * time.Second
	DefaultMaxBulkStores   = 5000
)

// Options configure a Server. Index, Client and Journal are required;
// Findings, Problems, Records and Prover may be nil (their pages say so).
type Options struct {
	// Listen is the console's address: loopback by default; any other
	// needs TLS or the proxy mode (the rule of internal/listen).
	Listen string
	// Auth is AuthDev, AuthClientCert or AuthProxy.
	Auth string
	// TLS serves HTTPS with its certificates; for AuthClientCert its
	// ClientCAs is the chain's CA, and a verified client certificate is
	// required. Nil serves plain HTTP (loopback, or behind the proxy).
	TLS *tls.Config
	// ProxyHeader names the user in AuthProxy (default
	// DefaultProxyHeader); ProxyFrom are the proxy's addresses, the only
	// peers served.
	ProxyHeader string
	ProxyFrom   []netip.Prefix
	// Roles are each user's roles, by identity (ValidIdentity). In
	// AuthDev, DevUser has every role.
	Roles map[string][]string

	Index   *fleet.Index
	Client  *fleet.Client
	Journal Journal

	Findings Findings
	Problems Problems
	Records  Records
	Prover   Prover

	// CommandTimeout bounds each command sent to a store.
	CommandTimeout time.Duration
	// BulkConcurrency bounds the commands of a bulk action in flight;
	// BulkSpread spreads each store's redriven movements over that
	// window (P5); BulkDeadline bounds a bulk action; MaxBulkStores
	// bounds its stores.
	BulkConcurrency int
	BulkSpread      time.Duration
	BulkDeadline    time.Duration
	MaxBulkStores   int

	SessionTTL time.Duration
	// LoginTTL is how long the dev mode's login link is valid.
	LoginTTL time.Duration
	Clock    func() time.Time
	Logger   *slog.Logger
}

// Server is the head-office console: server-rendered pages over the
// fleet index and hq's other sources, and signed actions.
type Server struct {
	o        Options
	sessions *sessions
	pages    pages
	handler  http.Handler
	refusals *tally.Reporter[refusalCause, string]
}

// New checks o and returns a server; Listen then Serve run it.
func New(o Options) (*Server, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	s := &Server{o: o, pages: parsePages()}
	s.sessions = &sessions{byID: map[string]*session{}, logins: map[string]time.Time{}, ttl: o.SessionTTL, clock: o.Clock, secure: o.TLS != nil}
	s.refusals = newRefusalReporter(s)
	s.handler = s.routes()
	return s, nil
}

// fill sets the defaults and returns every problem with o at once.
func (o *Options) fill() error {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.ProxyHeader == "" {
		o.ProxyHeader = DefaultProxyHeader
	}
	o.SessionTTL = cmpOr(o.SessionTTL, DefaultSessionTTL)
	o.LoginTTL = cmpOr(o.LoginTTL, DefaultLoginTTL)
	o.CommandTimeout = cmpOr(o.CommandTimeout, DefaultCommandTimeout)
	o.BulkSpread = cmpOr(o.BulkSpread, DefaultBulkSpread)
	o.BulkDeadline = cmpOr(o.BulkDeadline, DefaultBulkDeadline)
	o.BulkConcurrency = cmpOr(o.BulkConcurrency, DefaultBulkConcurrency)
	o.MaxBulkStores = cmpOr(o.MaxBulkStores, DefaultMaxBulkStores)
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var bad []string
	guarded := o.TLS != nil || o.Auth == AuthProxy
	if o.Auth == AuthDev {
		guarded = false // the dev mode's link is for this machine only
	}
	if err := (listen.Rule{Field: "console.listen", Example: DefaultListen, Guard: "serve it with TLS (console.tls) or behind a reverse proxy (console.auth: proxy)"}).Check(o.Listen, guarded); err != nil {
		bad = append(bad, err.Error())
	}
	switch o.Auth {
	case AuthDev:
		o.Roles = map[string][]string{DevUser: slices.Clone(Roles)}
	case AuthClientCert:
		if o.TLS == nil || o.TLS.ClientCAs == nil {
			bad = append(bad, "console.auth: client_cert needs console.tls with the chain's CA (client_ca_file)")
		} else {
			o.TLS.ClientAuth = tls.RequireAndVerifyClientCert
		}
	case AuthProxy:
		if len(o.ProxyFrom) == 0 {
			bad = append(bad, "console.proxy.from: the proxy mode needs the proxy's addresses: a header from any other peer is refused")
		}
	default:
		bad = append(bad, fmt.Sprintf("console.auth: %q is not dev, client_cert or proxy", o.Auth))
	}
	for id, roles := range o.Roles {
		if !ValidIdentity(id) {
			bad = append(bad, fmt.Sprintf("console.roles: %q is not a user id: letters, digits and . _ @ : + = -", id))
		}
		for _, r := range roles {
			if !slices.Contains(Roles, r) {
				bad = append(bad, fmt.Sprintf("console.roles: %q is not viewer, operator or auditor", r))
			}
		}
	}
	if o.BulkSpread > MaxBulkSpread {
		bad = append(bad, fmt.Sprintf("console.bulk.spread: %s is longer than the agents take, %s", o.BulkSpread, MaxBulkSpread))
	}
	if o.Index == nil || o.Client == nil || o.Journal == nil {
		bad = append(bad, "console: the fleet index, the signing client and the journal are required")
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return errors.New(strings.Join(bad, "\n"))
	}
	return nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Handler is the console's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Listen opens the console's listener (TLS when configured).
func (s *Server) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.o.Listen)
	if err != nil {
		return nil, fmt.Errorf("console: listen on %s: %w", s.o.Listen, err)
	}
	if s.o.TLS != nil {
		return tls.NewListener(ln, s.o.TLS), nil
	}
	return ln, nil
}

// LoginURL makes a one-time login link for the dev mode, valid for
// LoginTTL, on the listener's address; "" in other modes.
func (s *Server) LoginURL(addr net.Addr) string {
	if s.o.Auth != AuthDev {
		return ""
	}
	scheme := "http"
	if s.o.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + addr.String() + "/login?t=" + s.sessions.newLogin(s.o.LoginTTL)
}

// Serve serves the console on ln until ctx ends, then shuts down,
// waiting at most shutdownWait for requests in flight.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.o.BulkDeadline + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.o.Logger.Handler(), slog.LevelWarn),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-done
	s.refusals.Drain() // the refusals counted and not yet journalled
	return err
}

// shutdownWait bounds how long Serve waits for requests in flight.
const shutdownWait = 10 * time.Second
