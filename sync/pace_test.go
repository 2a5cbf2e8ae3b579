package sync

import (
	"context"
	"fmt"
	"path/filepath"
	stdsync "sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/status"
)

// scripted is a central whose behaviour the test sets: it stores, it is
// full, or it never answers. It stands in for the network only in these
// tests of the sender's pacing, which run in virtual time; everything the
// product relies on is tested against real servers elsewhere.
type scripted struct {
	mu      stdsync.Mutex
	mode    string // "ok", "full" or "silent"
	stored  map[string]bool
	seq     uint64
	sends   []time.Time
	timeout time.Duration
}

type scriptedFuture struct {
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *scriptedFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *scriptedFuture) Err() <-chan error            { return f.err }

func (c *scripted) setMode(m string) {
	c.mu.Lock()
	c.mode = m
	c.mu.Unlock()
}

func (c *scripted) sendTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.sends...)
}

func (c *scripted) publishAsync(m *nats.Msg) (future, error) {
	f := &scriptedFuture{ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	c.mu.Lock()
	mode := c.mode
	c.sends = append(c.sends, time.Now())
	c.mu.Unlock()
	go func() {
		switch mode {
		case "ok":
			time.Sleep(time.Millisecond)
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.stored[m.Subject] {
				f.err <- &jetstream.APIError{Code: 400, ErrorCode: codeWrongLastSequence, Description: "wrong last sequence: 1"}
				return
			}
			c.seq++
			c.stored[m.Subject] = true
			f.ok <- &jetstream.PubAck{Stream: "RX_MOVEMENTS", Sequence: c.seq}
		case "full":
			time.Sleep(time.Millisecond)
			f.err <- &jetstream.APIError{Code: 503, ErrorCode: codeStoreFailed, Description: "maximum messages exceeded"}
		default:
			time.Sleep(c.timeout)
			f.err <- jetstream.ErrAsyncPublishTimeout
		}
	}()
	return f, nil
}

func (c *scripted) publish(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	f, _ := c.publishAsync(m)
	select {
	case a := <-f.Ok():
		return a, nil
	case err := <-f.Err():
		return nil, err
	}
}

func (c *scripted) publishBatch(context.Context, []*nats.Msg) (uint64, error) {
	return 0, fmt.Errorf("not used")
}

func (c *scripted) lastDigest(context.Context, string) (string, uint64, error) {
	return "", 0, errNotStored
}

func (c *scripted) maxPayload() int64 { return 0 }

// pacingRig runs a sender over a real queue against a scripted central, in
// the virtual time of a synctest bubble.
func pacingRig(t *testing.T, c *scripted, o SenderOptions) (*queue.Queue, *sender, func()) {
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: testStore})
	if err != nil {
		t.Fatal(err)
	}
	o.StoreID, o.NoBatch = testStore, true
	s := newSender(q, c, o, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.run(ctx)
		close(done)
	}()
	return q, s, func() {
		cancel()
		<-done
		q.Close()
	}
}

func enqueueN(t *testing.T, q *queue.Queue, from, n int) {
	t.Helper()
	var items []movement.Prepared
	for i := from; i < from+n; i++ {
		p, es := movement.Prepare([]byte(movementJSON(fmt.Sprintf("P%05d", i), "")), testStore, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
		if es != nil {
			t.Fatal(es)
		}
		items = append(items, p)
	}
	if _, err := q.Enqueue(items); err != nil {
		t.Fatal(err)
	}
}

func counts(t *testing.T, q *queue.Queue) (pending, synced, quarantined uint64) {
	t.Helper()
	s, err := q.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s.Count(queue.Pending), s.Count(queue.Synced), s.Count(queue.Quarantined)
}

// TestPacingThroughAThirtyMinuteOutage: central is full for thirty minutes.
// The sender pauses, charges nothing, probes at full-jitter intervals that
// never exceed the five-minute cap, and resumes on the first success. Then
// the connection drops and comes back: the sender resumes within the
// resume jitter.
func TestPacingThroughAThirtyMinuteOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &scripted{mode: "ok", stored: map[string]bool{}, timeout: 5 * time.Second}
		q, s, stop := pacingRig(t, c, SenderOptions{ResumeJitter: 30 * time.Second, Probe: retry.Probe})
		defer stop()

		s.notify(event{kind: evConnected, url: "nats://central"})
		enqueueN(t, q, 0, 100)
		time.Sleep(time.Minute)
		if _, synced, _ := counts(t, q); synced != 100 {
			t.Fatalf("synced %d before the outage, want 100", synced)
		}

		c.setMode("full")
		start := time.Now()
		enqueueN(t, q, 100, 100)
		time.Sleep(30 * time.Minute)
		conn := s.connection()
		if conn.State != status.Paused || conn.Reason == "" {
			t.Fatalf("after 30 minutes of a full central: %+v", conn)
		}
		pending, _, quarantined := counts(t, q)
		if pending != 100 || quarantined != 0 {
			t.Fatalf("pending %d quarantined %d, want 100 and 0", pending, quarantined)
		}
		noAttemptsCharged(t, q)
		var probes []time.Time
		for _, at := range c.sendTimes() {
			if at.After(start.Add(time.Second)) {
				probes = append(probes, at)
			}
		}
		if len(probes) < 6 {
			t.Fatalf("%d probes in 30 minutes, want at least 6 (cap 5 min)", len(probes))
		}
		for i := 1; i < len(probes); i++ {
			if gap := probes[i].Sub(probes[i-1]); gap > retry.Probe.MaxDelay+time.Second {
				t.Fatalf("probe gap %s exceeds the 5 minute cap", gap)
			}
		}
		t.Logf("%d probes during the outage", len(probes))

		c.setMode("ok")
		time.Sleep(retry.Probe.MaxDelay + time.Minute)
		if _, synced, _ := counts(t, q); synced != 200 {
			t.Fatalf("synced %d after central recovered, want 200", synced)
		}
		if conn := s.connection(); conn.State != status.Online {
			t.Fatalf("after recovery: %+v", conn)
		}

		// The link drops for ten minutes: nothing is sent, nothing charged.
		s.notify(event{kind: evDisconnected})
		enqueueN(t, q, 200, 50)
		synctest.Wait()
		before := len(c.sendTimes())
		time.Sleep(10 * time.Minute)
		if n := len(c.sendTimes()); n != before {
			t.Fatalf("%d publishes while offline", n-before)
		}
		back := time.Now()
		s.notify(event{kind: evConnected, url: "nats://central"})
		time.Sleep(time.Minute)
		sends := c.sendTimes()
		if len(sends) == before {
			t.Fatal("nothing sent after reconnecting")
		}
		if wait := sends[before].Sub(back); wait > 30*time.Second {
			t.Fatalf("first send %s after reconnecting, want within the 30s resume jitter", wait)
		}
		if _, synced, _ := counts(t, q); synced != 250 {
			t.Fatalf("synced %d, want 250", synced)
		}
		noAttemptsCharged(t, q)
	})
}

// TestPacingSilentCentral: central takes publishes and never answers.
// Every movement times out, which is central's problem: the sender pauses
// and no movement is charged an attempt, however long it lasts.
func TestPacingSilentCentral(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &scripted{mode: "silent", stored: map[string]bool{}, timeout: 5 * time.Second}
		q, s, stop := pacingRig(t, c, SenderOptions{ResumeJitter: time.Second, Probe: retry.Probe})
		defer stop()
		s.notify(event{kind: evConnected, url: "nats://central"})
		enqueueN(t, q, 0, 20)
		time.Sleep(2 * time.Hour)
		if conn := s.connection(); conn.State != status.Paused {
			t.Fatalf("after 2 hours of silence: %+v", conn)
		}
		if pending, _, quarantined := counts(t, q); pending != 20 || quarantined != 0 {
			t.Fatalf("pending %d quarantined %d", pending, quarantined)
		}
		noAttemptsCharged(t, q)
		c.setMode("ok")
		time.Sleep(6 * time.Minute)
		if _, synced, _ := counts(t, q); synced != 20 {
			t.Fatalf("synced %d after central answered again, want 20", synced)
		}
	})
}
