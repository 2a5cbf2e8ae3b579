package hl7

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	stdsync "sync"
	"time"

	"github.com/rxedge/agent/intake"
)

// Server is the MLLP listener. Each connection has its own goroutine,
// which reads a frame, hands it to the Handler and writes the
// acknowledgement before reading the next: a sender gets its answers in
// order, and one that never reads its acknowledgements is cut off after
// WriteTimeout without holding up the others. Every refusal (of a
// connection or a message) is counted by reason and logged in aggregate
// (see RefusalWindow), so no sender can flood the log. The connection set
// is owned by mu.
type Server struct {
	opts    intake.HL7Options
	h       *Handler
	ln      net.Listener
	log     *slog.Logger
	refused *refusals

	mu      stdsync.Mutex
	conns   map[*conn]struct{}
	perPeer map[string]int // open connections by address
	closing bool
	wg      stdsync.WaitGroup
}

type conn struct {
	net.Conn
	peer    string // its address without the port, for the refusal log
	mu      stdsync.Mutex
	closing bool
}

// Listen opens the listener of opts (validated) for h.
func Listen(opts intake.HL7Options, h *Handler, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxConnectionsPerPeer <= 0 || opts.MaxConnectionsPerPeer > opts.MaxConnections {
		opts.MaxConnectionsPerPeer = opts.MaxConnections // options not validated: one bound
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("intake.hl7.listen %s: %w", opts.Listen, err)
	}
	if opts.CertFile != "" {
		cfg, err := tlsConfig(opts)
		if err != nil {
			ln.Close()
			return nil, err
		}
		ln = tls.NewListener(ln, cfg)
	}
	return &Server{opts: opts, h: h, ln: ln, log: log, refused: newRefusals(log), conns: map[*conn]struct{}{}, perPeer: map[string]int{}}, nil
}

func tlsConfig(o intake.HL7Options) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("intake.hl7.cert_file, key_file: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("intake.hl7.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("intake.hl7.ca_file %s: no PEM certificate in it", o.CAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts connections until ctx ends; then it stops accepting, lets
// every message in hand be stored and acknowledged, closes the
// connections and returns.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, s.shutdown)
	defer stop()
	var err error
	for {
		c, aerr := s.ln.Accept()
		if aerr != nil {
			if ctx.Err() != nil {
				break
			}
			var ne net.Error
			if errors.As(aerr, &ne) && ne.Timeout() {
				continue
			}
			err = aerr
			s.shutdown()
			break
		}
		s.admit(c)
	}
	s.wg.Wait()
	s.refused.rep.Drain()
	return err
}

func (s *Server) admit(nc net.Conn) {
	c := &conn{Conn: nc, peer: peerOf(nc.RemoteAddr())}
	// A refusal is counted before the connection is closed: what the
	// sender sees follows what the counters say.
	if !s.opts.Permitted(nc.RemoteAddr()) {
		s.refused.note(ReasonNotAllowed, c.peer, refusalDetail{})
		nc.Close()
		return
	}
	if reason, limit := s.enter(c); reason != "" {
		s.refused.note(reason, c.peer, refusalDetail{limit: limit})
		nc.Close()
		return
	}
	go func() {
		defer s.wg.Done()
		s.serve(c)
		s.mu.Lock()
		delete(s.conns, c)
		if s.perPeer[c.peer]--; s.perPeer[c.peer] <= 0 {
			delete(s.perPeer, c.peer)
		}
		s.mu.Unlock()
		c.Close()
	}()
}

// enter admits c to the connection set, or says why not (a refusal
// reason and the limit crossed): the agent is stopping, max_connections
// are open, or max_connections_per_peer from c's address, so that one
// sender cannot hold every connection.
func (s *Server) enter(c *conn) (reason string, limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing:
		return ReasonShuttingDown, 0
	case len(s.conns) >= s.opts.MaxConnections:
		return ReasonTooMany, s.opts.MaxConnections
	case s.perPeer[c.peer] >= s.opts.MaxConnectionsPerPeer:
		return ReasonPeerLimit, s.opts.MaxConnectionsPerPeer
	}
	s.conns[c] = struct{}{}
	s.perPeer[c.peer]++
	s.wg.Add(1)
	return "", 0
}

// Refusals is the count of refusals by reason (RefusalReasons) since the
// server started, for metrics.
func (s *Server) Refusals() map[string]uint64 { return s.refused.snapshot() }

// Conns is the number of open connections.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// shutdown stops accepting and wakes every connection waiting for a frame;
// one handling a message finishes it first.
func (s *Server) shutdown() {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, c := range conns {
		c.mu.Lock()
		c.closing = true
		c.SetReadDeadline(time.Unix(1, 0))
		c.mu.Unlock()
	}
}

// waitFrame sets the read deadline, unless the server is closing.
func (c *conn) waitFrame(deadline time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.SetReadDeadline(deadline)
	return true
}

// serve reads frames from c and answers each until c ends. The idle
// deadline runs from the last message accepted (or the connection's
// start), not from the last frame: a sender that keeps a connection open
// with frames the agent refuses, or trickles one frame's bytes, is idle,
// and is closed after idle_timeout like one that sends nothing.
func (s *Server) serve(c *conn) {
	fr := NewFrameReader(c, s.opts.MaxMessageBytes)
	deadline := time.Now().Add(s.opts.IdleTimeout)
	for {
		if !c.waitFrame(deadline) {
			return
		}
		msg, err := fr.Next()
		if err != nil && !errors.Is(err, ErrFrame) {
			s.ended(c, err)
			return
		}
		// A frame whose end is malformed is still answered (AR or
		// better): the sender learns of it rather than timing out.
		ack, out := s.h.Handle(msg)
		if out.Code != AA {
			reason, d := messageRefusal(out)
			s.refused.note(reason, c.peer, d)
		} else {
			deadline = time.Now().Add(s.opts.IdleTimeout)
		}
		c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		if _, err := c.Write(AppendFrame(nil, ack)); err != nil {
			reason := connRefusal(err)
			if isTimeout(err) {
				reason = ReasonAckTimeout
			}
			s.refused.note(reason, c.peer, refusalDetail{})
			return
		}
	}
}

// ended notes why a connection ended while a frame was awaited, unless
// its sender closed it between messages or the agent is stopping.
func (s *Server) ended(c *conn, err error) {
	switch {
	case errors.Is(err, ErrTooLarge):
		s.h.Counter.Add(0, 0, 1, s.h.Sink.Now())
		s.refused.note(ReasonTooLarge, c.peer, refusalDetail{limit: s.opts.MaxMessageBytes})
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
	case isTimeout(err):
		c.mu.Lock()
		closing := c.closing
		c.mu.Unlock()
		if !closing {
			s.refused.note(ReasonIdle, c.peer, refusalDetail{})
		}
	default:
		s.refused.note(connRefusal(err), c.peer, refusalDetail{})
	}
}

// Close closes the listener of a server that will not Serve.
func (s *Server) Close() error {
	s.refused.rep.Close()
	return s.ln.Close()
}
