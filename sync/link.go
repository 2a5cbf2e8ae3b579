package sync

import (
	"context"
	"net/url"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/rxedge/agent/internal/redact"
	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/status"
)

// link is the connection state the sender loop and the settler share: the
// current connection's transport and context, the connection snapshot the
// status document shows, and the metrics. Its methods are safe for
// concurrent use. The loop writes the connection state (up, down,
// setState); the settler reads the transport and context and records what
// it learnt (settled).
type link struct {
	m     *metrics.Metrics
	state atomic.Int32 // the loop's state: stOffline, stResuming, stOnline or stPaused

	mu   stdsync.Mutex
	tr   transport
	snap status.Connection
	// ctx lives as long as one connection: requests waiting on the
	// connection (batches, read-backs, probes) end at once when it drops,
	// instead of waiting out their timeouts.
	ctx    context.Context
	cancel context.CancelFunc
}

// redactURL is a server URL without credentials, with the scheme nats://
// when it has none.
func redactURL(s string) string {
	if s == "" {
		return ""
	}
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	return redact.URL(s)
}

// serverOf is the configured server an error is about, without
// credentials: the only one, or the one whose host the error names; ""
// when that cannot be told.
func serverOf(err error, servers []string) string {
	if len(servers) == 1 {
		return redactURL(servers[0])
	}
	text := err.Error()
	for _, s := range servers {
		r := redactURL(s)
		if u, perr := url.Parse(r); perr == nil && u.Host != "" && (strings.Contains(text, u.Host) || strings.Contains(text, u.Hostname())) {
			return r
		}
	}
	return ""
}

func newLink(tr transport, m *metrics.Metrics) *link {
	now := time.Now().UTC()
	l := &link{m: m, tr: tr, snap: status.Connection{State: status.Offline, Since: &now}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.cancel() // not connected yet
	m.SetConnState(status.Offline)
	return l
}

// transport is the current connection's transport (nil before the first).
func (l *link) transport() transport {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tr
}

func (l *link) setTransport(tr transport) {
	l.mu.Lock()
	l.tr = tr
	l.mu.Unlock()
}

// context is the context of the current connection; it is cancelled when
// the connection drops.
func (l *link) context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx
}

// up starts the context of a new connection to url.
func (l *link) up(url string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snap.ConnectedURL = url
	l.cancel()
	l.ctx, l.cancel = context.WithCancel(context.Background())
}

// down ends the current connection's context.
func (l *link) down() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snap.ConnectedURL = ""
	l.cancel()
}

// setServers records the configured servers for the status document,
// without credentials.
func (l *link) setServers(servers []string) {
	l.mu.Lock()
	l.snap.Servers = make([]string, len(servers))
	for i, s := range servers {
		l.snap.Servers[i] = redactURL(s)
	}
	l.mu.Unlock()
}

// setProblem records why the agent cannot reach or use central (nil: it
// can) for the status document (and the metrics, which read it).
func (l *link) setProblem(p *status.ConnProblem) {
	l.mu.Lock()
	l.snap.Problem = p
	l.mu.Unlock()
}

// setState records the loop's state and why it is in it.
func (l *link) setState(st int32, reason string) {
	l.state.Store(st)
	name := stateName(st)
	l.mu.Lock()
	if l.snap.State != name || l.snap.Reason != reason {
		now := time.Now().UTC()
		if l.snap.State != name {
			l.snap.Since = &now
		}
		l.snap.State, l.snap.Reason = name, reason
	}
	l.mu.Unlock()
	l.m.SetConnState(name)
}

// online reports whether the loop is online (not offline, resuming or
// paused).
func (l *link) online() bool { return l.state.Load() == stOnline }

// reason is why the sender is in its state.
func (l *link) reason() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snap.Reason
}

// settled records a settled group: when something was last synced, and
// the kind of the last failure.
func (l *link) settled(now time.Time, synced int, lastErrKind string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := now.UTC()
	if synced > 0 {
		l.snap.LastSyncAt = &t
	}
	if lastErrKind != "" {
		l.snap.LastErrorKind, l.snap.LastErrorAt = lastErrKind, &t
	}
}

// connection is the snapshot for the status document.
func (l *link) connection() status.Connection {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.snap
	c.Servers = append([]string(nil), l.snap.Servers...)
	if p := l.snap.Problem; p != nil {
		cp := *p
		c.Problem = &cp
	}
	return c
}
