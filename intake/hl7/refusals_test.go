package hl7

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/testkit/syncbuf"
)

// serveLogged starts a server logging to log; stop ends Serve and waits
// for it, so every refusal is logged when it returns.
func serveLogged(t *testing.T, h *Handler, o intake.HL7Options, log *slog.Logger) (s *Server, stop func()) {
	t.Helper()
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	opts := intake.Options{HL7: o}
	if errs := opts.Validate(); errs != nil {
		t.Fatal(errs)
	}
	s, err := Listen(opts.HL7, h, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return s, stop
}

// localAddr is an address of this machine that is not loopback, for a
// listener whose peers on it are not loopback either; "" when there is
// none.
func localAddr() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
			return p.Addr().String()
		}
	}
	return ""
}

// refuseLoop connects n times, each time doing what send does, and reads
// until the server closes the connection.
func refuseLoop(t *testing.T, addr string, n int, send func(net.Conn)) {
	t.Helper()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(time.Minute))
		send(c)
		io.Copy(io.Discard, c) // a reset after a refused frame is an end too
		c.Close()
	}
}

var refusalLine = regexp.MustCompile(`msg=HL7_REFUSED reason=(\S+) peer=(\S+) count=(\d+)`)

// TestRefusalsAreCountedAndLoggedInAggregate refuses, over TCP, each kind
// of sender a listener meets in a loop: connections past
// max_connections, frames over max_message_bytes, frames cut short,
// messages that do not decode, and (where this machine has an address off
// loopback) peers not allowed. Every refusal is counted under its reason,
// and the log holds at most a line per reason and peer per
// RefusalWindow, plus one at the end, whose counts add up to the
// refusals: thousands of refusals, a handful of lines, none of them
// holding a value of the messages (which carry the patient marker).
func TestRefusalsAreCountedAndLoggedInAggregate(t *testing.T) {
	h, _ := newHandler(t)
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	start := time.Now()
	s, stop := serveLogged(t, h, intake.HL7Options{MaxConnections: 2, MaxMessageBytes: 4096, IdleTimeout: time.Hour}, log)
	addr := s.Addr().String()
	want := map[string]uint64{}

	// Two senders hold the connections allowed; a third connects in a loop.
	held := []net.Conn{dial(t, s), dial(t, s)}
	for i, c := range held {
		if code := roundTrip(t, c, NewFrameReader(c, 0), rds("H"+strconv.Itoa(i), "RXH"+strconv.Itoa(i), "1", "12345-6789-01", "1", "EA", "")); code != AA {
			t.Fatalf("held connection %d: %s", i, code)
		}
	}
	want[ReasonTooMany] = 1000
	refuseLoop(t, addr, 1000, func(net.Conn) {})
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "the held connections to close", func() bool { return s.Conns() == 0 })

	want[ReasonTooLarge] = 300
	big := AppendFrame(nil, []byte("MSH|^~\\&|"+strings.Repeat(Marker, 5000/len(Marker)+1)))
	refuseLoop(t, addr, 300, func(c net.Conn) { c.Write(big) })

	want[ReasonMidMessage] = 300
	refuseLoop(t, addr, 300, func(c net.Conn) {
		c.Write(append([]byte{StartBlock}, "MSH|^~\\&|"+Marker...))
		c.(*net.TCPConn).CloseWrite()
	})

	want[ReasonMalformed] = 1000
	c := dial(t, s)
	bad := AppendFrame(nil, []byte("MSH|^~\\&|"+Marker+strings.Repeat("|", MaxFields)))
	go c.Write([]byte(strings.Repeat(string(bad), 1000)))
	fr := NewFrameReader(c, 0)
	for i := range 1000 {
		ack, err := fr.Next()
		if err != nil {
			t.Fatalf("ACK %d: %v", i, err)
		}
		if code, _, errs := ackParts(t, ack); code != AR || len(errs) != 1 || !strings.HasPrefix(errs[0], "MSH^1^301^1|100^") {
			t.Fatalf("ACK %d: %s %v, want AR at MSH-301 (100)", i, code, errs)
		}
	}
	c.Close()

	if ip := localAddr(); ip != "" {
		other, stopOther := serveLogged(t, h, intake.HL7Options{Listen: net.JoinHostPort(ip, "0"), AllowedHosts: []string{"198.51.100.7"}}, log)
		refuseLoop(t, other.Addr().String(), 300, func(net.Conn) {})
		stopOther()
		if got := other.Refusals()[ReasonNotAllowed]; got != 300 {
			t.Errorf("%d refusals of a peer not allowed counted, want 300", got)
		}
		want[ReasonNotAllowed] = 300
	} else {
		t.Log("no address off loopback: peers not allowed are not tried")
	}
	// Each refusal is counted before its connection is closed or its
	// ACK written, so every one is counted by now.
	stop()
	elapsed := time.Since(start)

	got := s.Refusals()
	for _, r := range []string{ReasonTooMany, ReasonTooLarge, ReasonMidMessage, ReasonMalformed} {
		if got[r] != want[r] {
			t.Errorf("%s: %d refusals counted, want %d", r, got[r], want[r])
		}
	}
	checkRefusalLog(t, logs.String(), want, elapsed)
}

// checkRefusalLog checks the log of refusals counted as want over
// elapsed: aggregated lines only, no value from a message, counts adding
// up to want, and at most a line per cause (reason and peer) per window,
// plus its first and the one when the server stopped.
func checkRefusalLog(t *testing.T, logs string, want map[string]uint64, elapsed time.Duration) {
	t.Helper()
	if strings.Contains(logs, Marker) {
		t.Errorf("the log holds a value from a message:\n%s", logs)
	}
	lines, logged, causes := 0, map[string]uint64{}, map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		lines++
		m := refusalLine.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Errorf("a log line that is not an aggregated refusal: %s", sc.Text())
			continue
		}
		n, _ := strconv.ParseUint(m[3], 10, 64)
		logged[m[1]] += n
		causes[m[1]+" "+m[2]] = true
	}
	total := uint64(0)
	for r, n := range want {
		total += n
		if logged[r] != n {
			t.Errorf("%s: the log lines count %d refusals, want %d", r, logged[r], n)
		}
	}
	bound := len(causes) * (2 + int(elapsed/RefusalWindow))
	t.Logf("%d refusals of %d causes in %s: %d log lines (bound %d)", total, len(causes), elapsed.Round(time.Millisecond), lines, bound)
	if lines > bound {
		t.Errorf("%d log lines for %d refusals of %d causes in %s, more than %d", lines, total, len(causes), elapsed, bound)
	}
}

// waitFor polls cond every 10ms until it holds, failing after a minute
// with what was awaited.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
