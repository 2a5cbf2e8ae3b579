package hl7

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/intake"
)

func dial(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute)) // a hung test fails, it does not hang
	return c
}

func roundTrip(t *testing.T, c net.Conn, fr *FrameReader, msg string) string {
	t.Helper()
	if _, err := c.Write(AppendFrame(nil, []byte(msg))); err != nil {
		t.Fatal(err)
	}
	ack, err := fr.Next()
	if err != nil {
		t.Fatalf("reading the ACK: %v", err)
	}
	code, _, _ := ackParts(t, ack)
	return code
}

// waitClosed reads until the server closes the connection; it returns
// whether anything but framing was read first.
func waitClosed(t *testing.T, c net.Conn) []byte {
	t.Helper()
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server did not close the connection within a minute")
	}
	return b
}

func TestServerBoundsHostileSenders(t *testing.T) {
	h, _ := newHandler(t)
	s := startServer(t, h, intake.HL7Options{MaxMessageBytes: 4096, MaxConnections: 3, IdleTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})

	t.Run("noise outside frames is skipped", func(t *testing.T) {
		c := dial(t, s)
		fr := NewFrameReader(c, 0)
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n\x00\xff"))
		if code := roundTrip(t, c, fr, rds("S1", "RX900", "1", "12345-6789-01", "1", "EA", "")); code != AA {
			t.Fatalf("after noise: %s", code)
		}
	})

	t.Run("a message over the bound closes the connection unanswered", func(t *testing.T) {
		c := dial(t, s)
		big := rds("S2", "RX901", "1", "12345-6789-01", "1", "EA", "") + "NTE|1||" + strings.Repeat("x", 5000) + "\r"
		var b []byte
		b = AppendFrame(b, []byte(big))
		b = AppendFrame(b, []byte(rds("S3", "RX902", "1", "12345-6789-01", "1", "EA", "")))
		c.Write(b)
		if got := waitClosed(t, c); len(got) != 0 {
			t.Fatalf("answered %q", got)
		}
	})

	t.Run("a message of separators is refused at its first limit, for about its size", func(t *testing.T) {
		// Its own server, taking messages of the default size.
		s := startServer(t, h, intake.HL7Options{})
		c := dial(t, s)
		fr := NewFrameReader(c, 0)
		msg := AppendFrame(nil, append([]byte("MSH|^~\\&"), bytes.Repeat([]byte("|"), intake.DefaultMaxMessageBytes-8)...))
		var code string
		var errs []string
		// What the server allocates to read, decode and answer it: its
		// frame buffer, not a string per separator (34 MB).
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c.Write(msg)
		ack, err := fr.Next()
		if err != nil {
			t.Fatalf("reading the ACK: %v", err)
		}
		runtime.ReadMemStats(&after)
		n := after.TotalAlloc - before.TotalAlloc
		code, _, errs = ackParts(t, ack)
		t.Logf("%d bytes allocated to answer a %d-byte message", n, len(msg))
		if code != AR || len(errs) != 1 || !strings.HasPrefix(errs[0], "MSH^1^301^1|100^") {
			t.Fatalf("ACK %s %v, want AR at MSH-301", code, errs)
		}
		if n > 4*uint64(len(msg)) {
			t.Errorf("%d bytes allocated to refuse a %d-byte message, more than 4 times its size", n, len(msg))
		}
	})

	t.Run("an idle connection is closed", func(t *testing.T) {
		c := dial(t, s)
		if got := waitClosed(t, c); len(got) != 0 {
			t.Fatalf("answered %q", got)
		}
	})

	t.Run("a sender that never reads its ACKs does not hold up others", func(t *testing.T) {
		// Its own server, whose idle timeout cannot end the connection: only
		// the write timeout can.
		s := startServer(t, h, intake.HL7Options{IdleTimeout: time.Hour, WriteTimeout: 300 * time.Millisecond})
		stuck, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer stuck.Close()
		// A small receive buffer: the server's writes block once its own
		// send buffer is full.
		stuck.(*net.TCPConn).SetReadBuffer(1024)
		// Unsupported messages are answered without a commit, and each ACK
		// echoes the 60 KB control id: a few hundred fill the socket
		// buffers. One write, so the server never waits for a frame.
		one := AppendFrame(nil, []byte("MSH|^~\\&|A|B|C|D|20260301||ADT^A01|"+strings.Repeat("C", 60000)+"|P|2.5\r"))
		go stuck.Write(bytes.Repeat(one, 400))
		c := dial(t, s)
		fr := NewFrameReader(c, 0)
		if code := roundTrip(t, c, fr, rds("S5", "RX904", "1", "12345-6789-01", "1", "EA", "")); code != AA {
			t.Fatalf("other sender: %s", code)
		}
		deadline := time.Now().Add(time.Minute)
		for s.Refusals()[ReasonAckTimeout] == 0 {
			if time.Now().After(deadline) {
				t.Fatal("waited a minute for the server to cut off a sender that does not read its ACKs")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("connections over the limit are refused", func(t *testing.T) {
		// Its own server, whose idle timeout cannot close an admitted
		// connection while the test opens the others.
		s := startServer(t, h, intake.HL7Options{MaxConnections: 3})
		before := s.Refusals()[ReasonTooMany]
		for i := 0; i < 3; i++ {
			c := dial(t, s)
			fr := NewFrameReader(c, 0)
			// An answered message proves the connection was admitted.
			roundTrip(t, c, fr, rds("L"+string(rune('0'+i)), "RX905", "1", "12345-6789-01", "1", "EA", ""))
		}
		extra := dial(t, s)
		if got := waitClosed(t, extra); len(got) != 0 {
			t.Fatalf("answered %q", got)
		}
		if s.Refusals()[ReasonTooMany] == before {
			t.Fatal("the refusal was not counted")
		}
	})
}

func TestPermitted(t *testing.T) {
	o := intake.Options{HL7: intake.HL7Options{Listen: "0.0.0.0:2575", AllowedHosts: []string{"10.1.2.3", "192.168.7.0/24"}}}
	if errs := o.Validate(); errs != nil {
		t.Fatal(errs)
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:5000": true, "[::1]:5000": true, "10.1.2.3:1": true, "10.1.2.4:1": false,
		"192.168.7.200:9": true, "192.168.8.1:9": false, "[::ffff:10.1.2.3]:1": true,
	} {
		a, _ := net.ResolveTCPAddr("tcp", addr)
		if got := o.HL7.Permitted(a); got != want {
			t.Errorf("Permitted(%s) = %v, want %v", addr, got, want)
		}
	}
	bad := intake.Options{HL7: intake.HL7Options{Listen: "0.0.0.0:2575"}}
	if errs := bad.Validate(); len(errs) != 1 || !strings.Contains(errs[0], "intake.hl7.listen") {
		t.Errorf("a wildcard listener without allowed hosts: %v", errs)
	}
}

// dialFrom connects to s from the loopback address ip, so that one test
// can be several peers; it skips the test where ip cannot be bound.
func dialFrom(t *testing.T, s *Server, ip string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Skipf("cannot connect from %s here: %v", ip, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute)) // a hung test fails, it does not hang
	return c
}

// TestOnePeerCannotHoldEveryConnection: one peer opened every connection
// the listener takes and kept each open past idle_timeout with a tiny
// frame the agent refuses, so every other sender was refused for as long
// as it liked. Now a peer holds at most max_connections_per_peer (the
// rest are refused and counted as too_many_from_peer), another peer still
// gets through, and a connection that sends only refused frames is closed
// after idle_timeout.
func TestOnePeerCannotHoldEveryConnection(t *testing.T) {
	h, _ := newHandler(t)
	s := startServer(t, h, intake.HL7Options{MaxConnections: 32, MaxConnectionsPerPeer: 4, IdleTimeout: time.Second})
	holder := make([]net.Conn, 32)
	for i := range holder {
		holder[i] = dialFrom(t, s, "127.0.0.1")
	}
	deadline := time.Now().Add(time.Minute)
	for s.Refusals()[ReasonPeerLimit] < 28 {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for 28 refusals of the holder's connections; refusals %v, %d open", s.Refusals(), s.Conns())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.Conns(); n > 4 {
		t.Fatalf("%d connections open from one peer, want at most 4", n)
	}
	other := dialFrom(t, s, "127.0.0.2")
	if code := roundTrip(t, other, NewFrameReader(other, 0), rds("P1", "RX990", "1", "12345-6789-01", "1", "EA", "")); code != AA {
		t.Fatalf("another peer: %s, want AA", code)
	}

	// The holder's admitted connections send a refused frame every
	// tenth of idle_timeout: each is still closed.
	closed := 0
	for _, c := range holder {
		fr := NewFrameReader(c, 0)
		for {
			if _, err := c.Write(AppendFrame(nil, []byte("MSH|^~\\&|X"))); err != nil {
				break
			}
			if _, err := fr.Next(); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("a connection sending only refused frames was not closed within a minute")
				}
				break
			}
			time.Sleep(100 * time.Millisecond) // the sender's pace, not a wait for the server
		}
		closed++
	}
	if closed != 32 || s.Refusals()[ReasonIdle] < 4 {
		t.Errorf("%d of 32 closed, %d idle refusals; want every one closed and the 4 admitted as idle", closed, s.Refusals()[ReasonIdle])
	}
}
