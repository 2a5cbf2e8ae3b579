package faultproxy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rxedge/agent/testkit/faultproxy"
)

// echo is a TCP server that writes back what it reads and reports every
// chunk it received.
type echo struct {
	ln       net.Listener
	received chan []byte
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("echo: listen: %v", err)
	}
	e := &echo{ln: ln, received: make(chan []byte, 100)}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.received <- bytes.Clone(buf[:n])
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

func (e *echo) accepted() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.conns)
}

// waitReceived waits until the echo server has read want, in one or more
// chunks.
func (e *echo) waitReceived(t *testing.T, want string) {
	t.Helper()
	var got []byte
	timeout := time.After(5 * time.Second)
	for !bytes.Equal(got, []byte(want)) {
		select {
		case b := <-e.received:
			got = append(got, b...)
		case <-timeout:
			t.Fatalf("echo server received %q within 5s, want %q", got, want)
		}
	}
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *faultproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func write(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
}

// roundTrip sends msg and expects it back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	write(t, c, msg)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read echo of %q: %v", msg, err)
	}
	if string(got) != msg {
		t.Fatalf("echo = %q, want %q", got, msg)
	}
}

// expectClosed expects the proxy to have closed c, or to close it soon.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 64))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("connection still open 5s later, want it closed by the proxy")
	}
	if err == nil {
		t.Fatalf("read %d bytes, want the connection closed", n)
	}
}

// expectSilence expects nothing to arrive on c for a while: the only way
// to observe that something does not happen.
func expectSilence(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := c.Read(make([]byte, 64))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, err %v; want nothing to arrive", n, err)
	}
}

func waitStats(t *testing.T, p *faultproxy.Proxy, what string, cond func(faultproxy.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := p.Wait(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func TestPass(t *testing.T) {
	e := startEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "hello")
	roundTrip(t, c, "world!")

	// The proxy counts a chunk after writing it on, so the echo can reach
	// the client before the last chunk is counted.
	waitStats(t, p, "11 bytes counted each way", func(s faultproxy.Stats) bool { return s.BytesUp >= 11 && s.BytesDown >= 11 })
	got := p.Stats()
	want := faultproxy.Stats{Accepted: 1, Active: 1, BytesUp: 11, BytesDown: 11}
	if got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
	if p.Mode() != faultproxy.Pass {
		t.Errorf("Mode = %v, want pass", p.Mode())
	}
}

func TestCut(t *testing.T) {
	e := startEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c1, c2 := dial(t, p), dial(t, p)
	roundTrip(t, c1, "one")
	roundTrip(t, c2, "two")

	p.Cut()
	expectClosed(t, c1)
	expectClosed(t, c2)
	waitStats(t, p, "no active connections", func(s faultproxy.Stats) bool { return s.Active == 0 })

	c3 := dial(t, p)
	roundTrip(t, c3, "three")
	if s := p.Stats(); s.Cuts != 2 || s.Accepted != 3 {
		t.Errorf("Stats = %+v, want 2 cuts of 3 accepted", s)
	}
}

func TestBlackhole(t *testing.T) {
	e := startEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	old := dial(t, p)
	roundTrip(t, old, "before")
	waitStats(t, p, "6 bytes counted each way", func(s faultproxy.Stats) bool { return s.BytesUp >= 6 && s.BytesDown >= 6 })

	p.Blackhole()
	write(t, old, "lost")
	waitStats(t, p, "4 bytes swallowed", func(s faultproxy.Stats) bool { return s.Swallowed == 4 })
	expectSilence(t, old)

	// A new connection is accepted, and never reaches the target.
	fresh := dial(t, p)
	write(t, fresh, "void")
	waitStats(t, p, "8 bytes swallowed", func(s faultproxy.Stats) bool { return s.Swallowed == 8 })
	expectSilence(t, fresh)
	if n := e.accepted(); n != 1 {
		t.Errorf("target accepted %d connections, want only the one from before the black hole", n)
	}
	if s := p.Stats(); s.BytesUp != 6 || s.BytesDown != 6 {
		t.Errorf("Stats = %+v, want only the 6 bytes from before forwarded each way", s)
	}

	// Back to Pass: the connections that lost bytes are cut, new ones pass.
	p.Pass()
	expectClosed(t, old)
	expectClosed(t, fresh)
	roundTrip(t, dial(t, p), "after")
	if s := p.Stats(); s.Cuts != 2 {
		t.Errorf("Cuts = %d, want 2", s.Cuts)
	}
}

func TestRefuse(t *testing.T) {
	e := startEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	old := dial(t, p)
	roundTrip(t, old, "before")

	p.Refuse()
	expectClosed(t, dial(t, p))
	roundTrip(t, old, "existing connections pass")

	p.Pass()
	roundTrip(t, dial(t, p), "after")
	if s := p.Stats(); s.Refused != 1 || s.Accepted != 3 {
		t.Errorf("Stats = %+v, want 1 refused of 3 accepted", s)
	}
}

func TestLoseReplies(t *testing.T) {
	tests := []struct {
		name    string
		request []byte
		reply   []byte
		chunks  []string // written one by one; the last one completes the request
	}{
		{name: "any reply to a request", request: []byte("REQ"), reply: nil, chunks: []string{"REQ 1"}},
		{name: "request split across writes", request: []byte("REQ"), reply: nil, chunks: []string{"xx RE", "Q 2"}},
		{name: "matching reply", request: []byte("REQ"), reply: []byte("Q 3"), chunks: []string{"REQ 3"}},
		{name: "any bytes are a request", request: nil, reply: nil, chunks: []string{"anything"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startEcho(t)
			p := newProxy(t, e.ln.Addr().String())
			p.LoseReplies(tc.request, tc.reply)

			// Twice: the mode stays until changed, on every connection.
			for i := 1; i <= 2; i++ {
				c := dial(t, p)
				if tc.request != nil {
					roundTrip(t, c, "hello") // no request yet: passes
				}
				sent := ""
				for j, chunk := range tc.chunks {
					if j < len(tc.chunks)-1 {
						roundTrip(t, c, chunk) // an incomplete request passes
						continue
					}
					write(t, c, chunk)
					sent = chunk
				}
				e.waitReceived(t, prefix(tc.request)+joined(tc.chunks[:len(tc.chunks)-1])+sent)
				expectClosed(t, c)
				if s := p.Stats(); s.LostReplies != int64(i) {
					t.Fatalf("connection %d: LostReplies = %d, want %d", i, s.LostReplies, i)
				}
			}

			p.Pass()
			roundTrip(t, dial(t, p), "REQ after")
		})
	}
}

// prefix is what the LoseReplies test sends before the request: "hello"
// when the request needs a pattern.
func prefix(request []byte) string {
	if request == nil {
		return ""
	}
	return "hello"
}

func joined(chunks []string) string {
	var b bytes.Buffer
	for _, c := range chunks {
		b.WriteString(c)
	}
	return b.String()
}

func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()

	p := newProxy(t, target)
	expectClosed(t, dial(t, p))
	if s := p.Stats(); s.DialFailed != 1 {
		t.Errorf("DialFailed = %d, want 1", s.DialFailed)
	}
}

func TestClose(t *testing.T) {
	e := startEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "hello")

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	expectClosed(t, c)
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Error("dial after Close succeeded, want it refused")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
