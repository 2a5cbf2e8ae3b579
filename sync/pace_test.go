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

	"github.com/rxedge/agent/central"
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
	// poison makes one subject fail on its own: "api" (central answers
	// with an error about it) or "silent" (no answer).
	poison     map[string]string
	batchErr   error // every atomic batch fails with it
	singleErr  error // every single publish fails with it
	digestHang bool  // direct gets are never answered
	// digestDelay, when set, is how long a direct get takes; digests and
	// maxDigests count the direct gets and the most in flight at once.
	digestDelay                    time.Duration
	digests, inDigest, maxInDigest int
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
	if p := c.poison[m.Subject]; p != "" {
		mode = "poison-" + p
	}
	if c.singleErr != nil {
		mode = "error"
	}
	c.sends = append(c.sends, time.Now())
	c.mu.Unlock()
	go func() {
		switch mode {
		case "poison-api":
			time.Sleep(time.Millisecond)
			f.err <- &jetstream.APIError{Code: 400, ErrorCode: 10999, Description: "something about this message"}
		case "error":
			time.Sleep(time.Millisecond)
			f.err <- c.singleErr
		case "ok":
			time.Sleep(time.Millisecond)
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.stored[m.Subject] {
				f.err <- &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 1"}
				return
			}
			c.seq++
			c.stored[m.Subject] = true
			f.ok <- &jetstream.PubAck{Stream: "RX_MOVEMENTS", Sequence: c.seq}
		case "full":
			time.Sleep(time.Millisecond)
			f.err <- &jetstream.APIError{Code: 503, ErrorCode: codeStreamStoreFailed, Description: "maximum messages exceeded"}
		default:
			time.Sleep(c.timeout)
			f.err <- jetstream.ErrAsyncPublishTimeout
		}
	}()
	return f, nil
}

func (c *scripted) publishBatch(context.Context, []*nats.Msg) (uint64, error) {
	time.Sleep(time.Millisecond)
	if c.batchErr != nil {
		return 0, c.batchErr
	}
	return 0, fmt.Errorf("not scripted")
}

func (c *scripted) lastDigest(ctx context.Context, _ string) (string, uint64, error) {
	if c.digestDelay > 0 {
		c.mu.Lock()
		c.digests++
		c.inDigest++
		c.maxInDigest = max(c.maxInDigest, c.inDigest)
		c.mu.Unlock()
		time.Sleep(c.digestDelay)
		c.mu.Lock()
		c.inDigest--
		c.mu.Unlock()
	}
	if c.digestHang {
		<-ctx.Done()
		return "", 0, ctx.Err()
	}
	return "", 0, errNotStored
}

func (c *scripted) maxPayload() int64 { return 0 }

// alive answers the liveness probe unless central is silent.
func (c *scripted) alive(ctx context.Context, _ string) error {
	c.mu.Lock()
	mode := c.mode
	c.mu.Unlock()
	if mode == "silent" {
		select {
		case <-time.After(c.timeout):
			return context.DeadlineExceeded
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	time.Sleep(time.Millisecond)
	return nil
}

// pacingRig runs a sender over a real queue against a scripted central, in
// the virtual time of a synctest bubble.
func pacingRig(t *testing.T, c *scripted, o Options) (*queue.Queue, *sender, func()) {
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: testStore})
	if err != nil {
		t.Fatal(err)
	}
	o.StoreID = testStore
	// An answer the fake was still holding back when the sender stopped
	// must come inside the bubble: its time stops when the test returns,
	// and a goroutine still asleep then fails the test. Cleanups run
	// before that, after stop.
	t.Cleanup(func() { time.Sleep(c.timeout + time.Millisecond) })
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
		q, s, stop := pacingRig(t, c, Options{NoBatch: true, ResumeJitter: 30 * time.Second, Probe: retry.Probe})
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
		q, s, stop := pacingRig(t, c, Options{NoBatch: true, ResumeJitter: time.Second, Probe: retry.Probe})
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

// TestPacingPoisonMovement: on a quiet store, one movement keeps failing on
// its own while central stores everything else — answering with an error
// about it, or not answering for it at all. The store's other movements
// must still be delivered, and the sender must not probe with the poison
// one for ever. A movement central answers about is charged until it is
// quarantined; so is one central never answers for, since central answers
// everything else (the other movements, the liveness probe).
func TestPacingPoisonMovement(t *testing.T) {
	for _, tc := range []struct{ poison, reason string }{
		{"api", "exhausted:api_error"},
		{"silent", "exhausted:timeout"},
	} {
		t.Run(tc.poison, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &scripted{mode: "ok", stored: map[string]bool{}, timeout: 5 * time.Second}
				q, s, stop := pacingRig(t, c, Options{NoBatch: true, ResumeJitter: time.Second, Probe: retry.Probe})
				defer stop()
				s.notify(event{kind: evConnected, url: "nats://central"})
				bad, es := movement.Prepare([]byte(movementJSON("BAD", "")), testStore, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
				if es != nil {
					t.Fatal(es)
				}
				c.mu.Lock()
				c.poison = map[string]string{central.Subject(testStore, bad.KeyString()): tc.poison}
				c.mu.Unlock()
				if _, err := q.Enqueue([]movement.Prepared{bad}); err != nil {
					t.Fatal(err)
				}
				// The pharmacy keeps working: a movement a minute.
				for i := 0; i < 120; i++ {
					time.Sleep(time.Minute)
					enqueueN(t, q, i, 1)
				}
				time.Sleep(10 * time.Minute)
				_, synced, quarantined := counts(t, q)
				e, _ := q.Get(bad.Key)
				if synced != 120 {
					t.Fatalf("%d of 120 movements synced while central took everything but one; poison %s after %d attempt(s); %+v",
						synced, e.State, e.Record.Attempts, s.connection())
				}
				if tc.reason == "" {
					return
				}
				if quarantined != 1 || e.State != queue.Quarantined || e.Record.Quarantine.Reason != tc.reason {
					t.Fatalf("the poison movement: %s %+v", e.State, e.Record)
				}
			})
		})
	}
}

// TestPacingStopIsBounded: the agent stops within its grace time even while
// the members of a refused batch are being read back from a central that
// never answers the read-backs.
func TestPacingStopIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &scripted{mode: "ok", stored: map[string]bool{}, timeout: 5 * time.Second, digestHang: true,
			batchErr:  &jetstream.APIError{Code: 400, ErrorCode: codeAtomicPublishContainsDuplicateMessage, Description: "atomic publish batch contains duplicate message id"},
			singleErr: &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 1"}}
		q, s, stop := pacingRig(t, c, Options{ResumeJitter: time.Millisecond, AttemptTimeout: 5 * time.Second})
		enqueueN(t, q, 0, 1000)
		s.notify(event{kind: evConnected, url: "nats://central"})
		time.Sleep(3 * time.Second) // the batch was refused; its members are being read back
		start := time.Now()
		stop()
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("stopping took %s with read-backs outstanding, want within the grace time", took)
		}
	})
}
