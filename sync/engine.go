package sync

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	stdsync "sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
)

// Engine connects to central and runs the sender and the heartbeat.
type Engine struct {
	q      *queue.Queue
	o      Options
	log    *slog.Logger
	m      *metrics.Metrics
	status func() (*status.Status, error)
	s      *sender

	mu       stdsync.Mutex
	handlers []func(*nats.Conn) error // run once connected, e.g. control responders
	beats    []func(context.Context, *nats.Conn, *status.Status) error
}

// New returns an engine for the queue q; zero fields of o take their
// defaults. statusFn builds the status document for heartbeats.
func New(q *queue.Queue, o Options, log *slog.Logger, m *metrics.Metrics, statusFn func() (*status.Status, error)) *Engine {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o = o.withDefaults()
	e := &Engine{q: q, o: o, log: log, m: m, status: statusFn}
	e.s = newSender(q, nil, o, log, m)
	return e
}

// OnConnect registers a function to run with the connection before the
// sender starts (control responders subscribe there).
func (e *Engine) OnConnect(fn func(*nats.Conn) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.handlers = append(e.handlers, fn)
}

// OnHeartbeat registers a function to run with every heartbeat's status
// document after it is published (the fleet view's summary is written
// there). Its error is logged at debug level.
func (e *Engine) OnHeartbeat(fn func(context.Context, *nats.Conn, *status.Status) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.beats = append(e.beats, fn)
}

// Connection is the sender's state for the status document.
func (e *Engine) Connection() status.Connection { return e.s.connection() }

// Run connects (retrying for ever in the background: the agent accepts
// movements with no network at all) and delivers until ctx ends. nats.go
// reconnects by itself; if it gives up on a connection (a server error it
// treats as fatal), Run makes a new one.
func (e *Engine) Run(ctx context.Context) error {
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		e.s.run(ctx)
	}()
	for {
		closed := make(chan error, 1)
		nc, err := e.connect(closed)
		if err != nil {
			// Bad credentials files and the like: nothing to retry.
			<-senderDone
			return err
		}
		stopWatch := watchAttempts(nc, e.s.notify)
		hbCtx, stopHB := context.WithCancel(ctx)
		go e.heartbeat(hbCtx, nc)
		select {
		case <-ctx.Done():
			// The sender finishes with this connection's transport first.
			<-senderDone
			stopHB()
			nc.Close()
			stopWatch()
			return nil
		case err := <-closed:
			stopHB()
			stopWatch()
			e.log.Error("CONNECTION_CLOSED", "error", errText(err), "action", "connecting again")
			e.s.notify(event{kind: evDisconnected, err: err})
			if err != nil {
				e.s.notify(event{kind: evConnError, err: err})
			}
		}
		wait := e.o.NATS.ReconnectWait + time.Duration(rand.Float64()*float64(e.o.NATS.ReconnectJitter))
		select {
		case <-ctx.Done():
			<-senderDone
			return nil
		case <-time.After(max(wait, time.Second)):
		}
	}
}

// connect makes a connection, its transport and its subscriptions. closed
// receives the error of a connection nats.go closed by itself.
func (e *Engine) connect(closed chan<- error) (*nats.Conn, error) {
	opts, err := connOptions(e.o, e.s)
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.ClosedHandler(func(nc *nats.Conn) {
		select {
		case closed <- nc.LastError():
		default:
		}
	}))
	nc, err := nats.Connect(strings.Join(e.o.NATS.Servers, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("sync: connect to central: %w", err)
	}
	// The window of single publishes, the singly resent members of a
	// refused batch, and a batch's oversized members all publish at once.
	tr, err := newJSTransport(nc, 2*e.o.MaxInFlight+e.o.BatchSize, e.o.AttemptTimeout)
	if err != nil {
		nc.Close()
		return nil, err
	}
	e.s.link.setTransport(tr)
	e.mu.Lock()
	handlers := e.handlers
	e.mu.Unlock()
	for _, h := range handlers {
		if err := h(nc); err != nil {
			e.log.Error("SUBSCRIBE_FAILED", "error", err.Error())
		}
	}
	return nc, nil
}

// watchAttempts reports the connection attempts that fail after the TCP
// connection was made (TLS, credentials, no greeting in time). nats.go
// reports those only by going from CONNECTING back to RECONNECTING, with
// the error as LastError until its next attempt; it hands failed dials to
// ReconnectErrHandler. The returned function stops watching.
func watchAttempts(nc *nats.Conn, notify func(event)) (stop func()) {
	ch := nc.StatusChanged(nats.CONNECTING, nats.RECONNECTING, nats.CONNECTED)
	go func() {
		connecting := false
		for st := range ch {
			if st == nats.RECONNECTING && connecting {
				if err := nc.LastError(); err != nil {
					notify(event{kind: evConnError, err: err})
				}
			}
			connecting = st == nats.CONNECTING
		}
	}()
	return func() { nc.RemoveStatusListener(ch) }
}

// connOptions are the nats.go options of the agent's connection: retry
// for ever, no reconnect buffer (the bbolt queue is the only buffer), the
// store's own inbox prefix, a short ping interval so a dead link is noticed
// quickly, and the configured credentials and TLS.
func connOptions(o Options, s *sender) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name("rxedge-agent/" + o.StoreID),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(o.NATS.ReconnectWait),
		nats.ReconnectJitter(o.NATS.ReconnectJitter, 2*o.NATS.ReconnectJitter),
		nats.ReconnectBufSize(-1),
		// A rejected credential (rotated, expired) is retried like any
		// outage instead of closing the connection for good.
		nats.IgnoreAuthErrorAbort(),
		nats.CustomInboxPrefix(central.InboxPrefix(o.StoreID)),
		nats.PingInterval(o.NATS.PingInterval),
		nats.MaxPingsOutstanding(2),
		nats.Timeout(5 * time.Second),
		nats.ConnectHandler(func(nc *nats.Conn) { s.notify(event{kind: evConnected, url: nc.ConnectedUrlRedacted()}) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { s.notify(event{kind: evConnected, url: nc.ConnectedUrlRedacted()}) }),
		// A failed dial; and the error of a failed first connection.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { s.notify(event{kind: evConnError, err: err}) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { s.notify(event{kind: evDisconnected, err: err}) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { s.notify(event{kind: evAsyncError, err: err}) }),
	}
	cred, err := o.NATS.Credentials()
	if err != nil {
		return nil, err
	}
	return append(opts, cred...), nil
}

// heartbeat publishes the status document (counts and states, never
// payload) every heartbeat interval.
func (e *Engine) heartbeat(ctx context.Context, nc *nats.Conn) {
	if e.status == nil {
		return
	}
	t := time.NewTicker(e.o.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !nc.IsConnected() {
			continue
		}
		st, err := e.status()
		if err != nil {
			continue
		}
		b, err := json.Marshal(st)
		if err != nil {
			continue
		}
		if err := nc.Publish(central.StatusSubject(e.o.StoreID), b); err != nil {
			e.log.Debug("HEARTBEAT_FAILED", "error", err.Error())
		}
		e.mu.Lock()
		beats := e.beats
		e.mu.Unlock()
		for _, fn := range beats {
			bctx, cancel := context.WithTimeout(ctx, e.o.AttemptTimeout)
			if err := fn(bctx, nc, st); err != nil {
				e.log.Debug("HEARTBEAT_HOOK_FAILED", "error", err.Error())
			}
			cancel()
		}
	}
}
