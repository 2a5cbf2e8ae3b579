// Package faultproxy is an in-process TCP proxy that breaks the network
// between a client and a server on command, for fault tests: cut every
// connection, turn the path into a black hole, refuse connections, or let
// requests through and lose the replies (a NATS publish that is stored but
// whose ack never arrives).
//
// Its promise: in Pass mode bytes are forwarded unchanged and in order;
// after a mode method returns, every chunk read from then on is handled by
// the new mode (a chunk already being written may still arrive). The proxy
// listens on loopback only. All state is guarded by one mutex in Proxy;
// each connection is served by two goroutines, one per direction, that
// Close waits for.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Mode is how the proxy treats traffic.
type Mode int

// The modes. Cut is not a mode but an action: it closes the current
// connections and leaves the mode as it was.
const (
	// Pass forwards bytes both ways. Connections that lost bytes in a
	// Blackhole are closed on the way back to Pass, since their streams
	// cannot resume.
	Pass Mode = iota
	// Blackhole accepts connections but forwards nothing either way: bytes
	// are read and dropped, like a dead network path that still accepts
	// writes. A connection accepted in this mode is never connected to the
	// target.
	Blackhole
	// Refuse closes each new connection as soon as it is accepted.
	// Existing connections keep passing.
	Refuse
	// LoseReplies forwards bytes both ways until, after the client sent a
	// request, the server answers: that answer is dropped and the
	// connection cut, on every connection, until the mode changes.
	LoseReplies
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Refuse:
		return "refuse"
	case LoseReplies:
		return "lose-replies"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Stats count what the proxy did since New.
type Stats struct {
	Accepted    int64 // connections accepted
	Refused     int64 // connections closed at once by Refuse
	DialFailed  int64 // connections closed because the target did not answer
	Active      int   // connections open now
	BytesUp     int64 // bytes forwarded from clients to the target
	BytesDown   int64 // bytes forwarded from the target to clients
	Swallowed   int64 // bytes read and dropped (Blackhole, LoseReplies)
	Cuts        int64 // connections closed by the proxy (Cut, a lost reply, leaving Blackhole)
	LostReplies int64 // replies dropped by LoseReplies
}

// dialTimeout bounds connecting to the target.
const dialTimeout = 5 * time.Second

// Proxy forwards connections from its loopback address to a target.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu      sync.Mutex
	mode    Mode
	request []byte // LoseReplies: what marks a request from the client
	reply   []byte // LoseReplies: what marks the reply from the server
	links   map[*link]struct{}
	stats   Stats
	changed chan struct{} // closed and replaced on every change of stats
	closed  bool
}

// link is one proxied connection. Fields below mu in Proxy are guarded by
// Proxy.mu.
type link struct {
	client, server net.Conn // server is nil when accepted in Blackhole
	close          sync.Once

	damaged    bool   // bytes were dropped: the streams cannot resume
	sawRequest bool   // LoseReplies: the client sent a request
	upTail     []byte // the end of the last chunk, to match across reads
	downTail   []byte
}

// New starts a proxy to target (host:port) on a free loopback port, in
// Pass mode.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen for %s: %w", target, err)
	}
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's address as a NATS URL.
func (p *Proxy) URL() string { return "nats://" + p.Addr() }

// Mode is the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Pass forwards traffic again.
func (p *Proxy) Pass() { p.setMode(Pass, nil, nil) }

// Blackhole drops all traffic from now on, on new and existing connections.
func (p *Proxy) Blackhole() { p.setMode(Blackhole, nil, nil) }

// Refuse closes new connections as soon as they are accepted.
func (p *Proxy) Refuse() { p.setMode(Refuse, nil, nil) }

// LoseReplies lets requests reach the server and loses the replies: on
// every connection, once the client has sent bytes containing request,
// the next chunk from the server containing reply is dropped and the
// connection cut. A nil request or reply matches any bytes. Patterns are
// found across chunk boundaries.
func (p *Proxy) LoseReplies(request, reply []byte) {
	p.setMode(LoseReplies, bytes.Clone(request), bytes.Clone(reply))
}

// LoseAcks is LoseReplies for NATS: a publish (PUB or HPUB) reaches the
// server, and the connection is cut before the next message the server
// delivers to the client (MSG or HMSG), which for a publishing client is
// the JetStream ack. The client's subscriptions and pings are unaffected.
// The match is on protocol text and could be fooled by payloads holding
// "PUB " or "MSG "; tests choose their payloads.
func (p *Proxy) LoseAcks() { p.LoseReplies([]byte("PUB "), []byte("MSG ")) }

func (p *Proxy) setMode(m Mode, request, reply []byte) {
	p.mu.Lock()
	var cut []*link
	if p.mode == Blackhole && m != Blackhole {
		for l := range p.links {
			if l.damaged || l.server == nil {
				cut = append(cut, l)
			}
		}
	}
	p.mode, p.request, p.reply = m, request, reply
	for l := range p.links {
		l.sawRequest, l.upTail, l.downTail = false, nil, nil
	}
	p.stats.Cuts += int64(len(cut))
	p.notify()
	p.mu.Unlock()
	for _, l := range cut {
		p.closeLink(l)
	}
}

// Cut closes every current connection, as a network failure would. New
// connections are handled by the current mode.
func (p *Proxy) Cut() {
	p.mu.Lock()
	var cut []*link
	for l := range p.links {
		cut = append(cut, l)
	}
	p.stats.Cuts += int64(len(cut))
	p.notify()
	p.mu.Unlock()
	for _, l := range cut {
		p.closeLink(l)
	}
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statsLocked()
}

func (p *Proxy) statsLocked() Stats {
	s := p.stats
	s.Active = len(p.links)
	return s
}

// Wait waits until cond holds for the counters, which it checks on every
// change, or until ctx is done.
func (p *Proxy) Wait(ctx context.Context, cond func(Stats) bool) error {
	for {
		p.mu.Lock()
		s, ch := p.statsLocked(), p.changed
		p.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("faultproxy: wait (stats %+v): %w", s, ctx.Err())
		}
	}
}

// Close stops listening, closes every connection and waits until all of
// the proxy's goroutines have ended. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var all []*link
	for l := range p.links {
		all = append(all, l)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range all {
		p.closeLink(l)
	}
	p.wg.Wait()
	return err
}

// notify wakes Wait. p.mu must be held.
func (p *Proxy) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // a passing error, such as too many open files
			continue
		}
		p.mu.Lock()
		p.stats.Accepted++
		mode, closed := p.mode, p.closed
		if mode == Refuse || closed {
			p.stats.Refused++
			p.notify()
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c, mode == Blackhole)
	}
}

// serve connects the client to the target, unless it was accepted into a
// black hole, and runs both directions.
func (p *Proxy) serve(c net.Conn, blackhole bool) {
	defer p.wg.Done()
	l := &link{client: c}
	if !blackhole {
		s, err := net.DialTimeout("tcp", p.target, dialTimeout)
		if err != nil {
			p.mu.Lock()
			p.stats.DialFailed++
			p.notify()
			p.mu.Unlock()
			c.Close()
			return
		}
		l.server = s
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.closeConns()
		return
	}
	p.links[l] = struct{}{}
	p.notify()
	p.mu.Unlock()

	if l.server != nil {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pump(l, false)
		}()
	}
	p.pump(l, true)
}

// pump copies one direction of l until either side fails or the proxy cuts
// the connection.
func (p *Proxy) pump(l *link, up bool) {
	src, dst := l.server, l.client
	if up {
		src, dst = l.client, l.server
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.forward(l, up, dst, buf[:n]) {
			break
		}
		if err != nil {
			break
		}
	}
	p.closeLink(l)
}

// forward handles one chunk read from one side; false means the link is
// done.
func (p *Proxy) forward(l *link, up bool, dst net.Conn, b []byte) bool {
	p.mu.Lock()
	if p.mode == Blackhole || dst == nil {
		l.damaged = true
		p.stats.Swallowed += int64(len(b))
		p.notify()
		p.mu.Unlock()
		return true
	}
	if p.mode == LoseReplies {
		if up {
			if l.sawRequest || contains(&l.upTail, b, p.request) {
				l.sawRequest = true
			}
		} else if l.sawRequest && contains(&l.downTail, b, p.reply) {
			p.stats.Swallowed += int64(len(b))
			p.stats.LostReplies++
			p.stats.Cuts++
			p.notify()
			p.mu.Unlock()
			return false
		}
	}
	p.mu.Unlock()

	if _, err := dst.Write(b); err != nil {
		return false
	}
	p.mu.Lock()
	if up {
		p.stats.BytesUp += int64(len(b))
	} else {
		p.stats.BytesDown += int64(len(b))
	}
	p.notify()
	p.mu.Unlock()
	return true
}

// contains reports whether pattern occurs in the bytes seen so far, given
// the tail kept from earlier chunks, and keeps a new tail. A nil pattern
// matches any bytes.
func contains(tail *[]byte, b, pattern []byte) bool {
	if len(pattern) == 0 {
		return true
	}
	joined := append(*tail, b...)
	found := bytes.Contains(joined, pattern)
	keep := min(len(joined), len(pattern)-1)
	*tail = bytes.Clone(joined[len(joined)-keep:])
	return found
}

// closeLink closes both connections of l and forgets it.
func (p *Proxy) closeLink(l *link) {
	l.closeConns()
	p.mu.Lock()
	if _, ok := p.links[l]; ok {
		delete(p.links, l)
		p.notify()
	}
	p.mu.Unlock()
}

func (l *link) closeConns() {
	l.close.Do(func() {
		l.client.Close()
		if l.server != nil {
			l.server.Close()
		}
	})
}
