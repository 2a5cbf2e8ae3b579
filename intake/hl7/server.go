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
	"sync/atomic"
	"time"

	"github.com/rxedge/agent/intake"
)

// Server is the MLLP listener. Each connection has its own goroutine,
// which reads a frame, hands it to the Handler and writes the
// acknowledgement before reading the next: a sender gets its answers in
// order, and one that never reads its acknowledgements is cut off after
// WriteTimeout without holding up the others. The connection set is
// owned by mu.
type Server struct {
	opts intake.HL7Options
	h    *Handler
	ln   net.Listener
	log  *slog.Logger

	mu      stdsync.Mutex
	conns   map[*conn]struct{}
	closing bool
	wg      stdsync.WaitGroup

	// Refused counts connections refused (too many, or not permitted).
	Refused atomic.Uint64
	// CutOff counts connections closed because their sender did not read
	// an acknowledgement within WriteTimeout.
	CutOff atomic.Uint64
}

type conn struct {
	net.Conn
	mu      stdsync.Mutex
	closing bool
}

// Listen opens the listener of opts (validated) for h.
func Listen(opts intake.HL7Options, h *Handler, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
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
	return &Server{opts: opts, h: h, ln: ln, log: log, conns: map[*conn]struct{}{}}, nil
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
	return err
}

func (s *Server) admit(nc net.Conn) {
	if !s.opts.Permitted(nc.RemoteAddr()) {
		s.Refused.Add(1)
		s.log.Warn("HL7_CONNECTION_REFUSED", "reason", "address not in intake.hl7.allowed_hosts")
		nc.Close()
		return
	}
	c := &conn{Conn: nc}
	s.mu.Lock()
	if s.closing || len(s.conns) >= s.opts.MaxConnections {
		s.mu.Unlock()
		s.Refused.Add(1)
		s.log.Warn("HL7_CONNECTION_REFUSED", "reason", "too many connections", "max", s.opts.MaxConnections)
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.serve(c)
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
}

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

// waitFrame sets the idle deadline, unless the server is closing.
func (c *conn) waitFrame(idle time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.SetReadDeadline(time.Now().Add(idle))
	return true
}

func (s *Server) serve(c *conn) {
	fr := NewFrameReader(c, s.opts.MaxMessageBytes)
	for {
		if !c.waitFrame(s.opts.IdleTimeout) {
			return
		}
		msg, err := fr.Next()
		switch {
		case errors.Is(err, ErrTooLarge):
			s.h.Counter.Add(0, 0, 1, s.h.Sink.Now())
			s.log.Warn("HL7_MESSAGE_TOO_LARGE", "max_bytes", s.opts.MaxMessageBytes)
			return
		case err != nil && !errors.Is(err, ErrFrame):
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.mu.Lock()
				closing := c.closing
				c.mu.Unlock()
				if !closing {
					s.log.Info("HL7_IDLE_CLOSED")
				}
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Info("HL7_CONNECTION_ENDED", "reason", errorKind(err))
			}
			return
		}
		// A frame whose end is malformed is still answered (AR or
		// better): the sender learns of it rather than timing out.
		ack, _ := s.h.Handle(msg)
		c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		if _, err := c.Write(AppendFrame(nil, ack)); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				s.CutOff.Add(1)
			}
			s.log.Warn("HL7_ACK_NOT_SENT", "reason", errorKind(err))
			return
		}
	}
}

// errorKind names a connection error without its text (which may quote
// addresses and is of no use in bulk).
func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "closed mid-message"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, new(tls.RecordHeaderError)):
		return "not tls"
	}
	return "connection error"
}

// Close closes the listener of a server that will not Serve.
func (s *Server) Close() error { return s.ln.Close() }
