package sync

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/dlqtest"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/syncbuf"
)

const testStore = "S0001"

// rig is one agent's queue and sync engine, running against real servers.
type rig struct {
	t      *testing.T
	q      *queue.Queue
	e      *Engine
	cancel context.CancelFunc
	done   chan error
	opts   Options
	tune   func(*Options)
	log    *slog.Logger
	logs   *syncbuf.Buffer
	m      *metrics.Metrics
}

// testOptions are the agent's options for tests: short timeouts and delays
// so outages resolve in seconds.
func testOptions(t *testing.T, servers ...string) Options {
	t.Helper()
	o := Options{StoreID: testStore, AttemptTimeout: 2 * time.Second, ResumeJitter: 200 * time.Millisecond,
		Ordinary:   retry.Policy{MaxAttempts: 5, BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond},
		Controlled: retry.Policy{MaxAttempts: 7, BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond},
	}
	o.NATS = NATSOptions{Servers: servers, PingInterval: 500 * time.Millisecond, ReconnectWait: time.Second, ReconnectJitter: time.Second}
	return o
}

// startRig opens a queue and runs an engine until the test ends.
func startRig(t *testing.T, o Options, tune func(*Options)) *rig {
	t.Helper()
	maxAhead := max(o.Controlled.MaxDelay, o.Ordinary.MaxDelay)
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: o.StoreID, MaxAhead: maxAhead})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := &rig{t: t, q: q, opts: o, tune: tune, log: log, logs: logs, m: metrics.New(nil)}
	r.m.WatchConnection(func() status.Connection { return r.e.Connection() })
	r.start()
	t.Cleanup(func() {
		r.stop()
		q.Close()
		if t.Failed() {
			t.Logf("agent log (last lines):\n%s", logs.Tail(40))
		}
	})
	return r
}

// start runs a new engine over the queue, like an agent process starting.
func (r *rig) start() {
	r.e = New(r.q, r.opts, r.log, r.m, nil)
	r.e.s.o.Probe = retry.Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	if r.tune != nil {
		r.tune(&r.e.s.o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan error, 1)
	go func() { r.done <- r.e.Run(ctx) }()
}

func (r *rig) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("engine: %v", err)
		}
	case <-time.After(15 * time.Second):
		r.t.Error("engine did not stop within 15s")
	}
}

// movementJSON is a valid movement with the given id; extra adds fields.
func movementJSON(id, extra string) string {
	return fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"%s}`, id, extra)
}

// enqueue stores movements M<from>..M<from+n-1>, in submissions of 500.
func (r *rig) enqueue(from, n int) []movement.Prepared {
	r.t.Helper()
	var all []movement.Prepared
	for i := from; i < from+n; i += 500 {
		var items []movement.Prepared
		for j := i; j < min(i+500, from+n); j++ {
			extra := ""
			if j%7 == 0 {
				extra = `,"schedule":"CII","dea_form_222":"123456789"`
			}
			items = append(items, r.prepare(movementJSON(fmt.Sprintf("M%06d", j), extra)))
		}
		if _, err := r.q.Enqueue(items); err != nil {
			r.t.Fatal(err)
		}
		all = append(all, items...)
	}
	return all
}

func (r *rig) prepare(js string) movement.Prepared {
	r.t.Helper()
	p, es := movement.Prepare([]byte(js), r.opts.StoreID, time.Now())
	if es != nil {
		r.t.Fatalf("prepare: %v", es)
	}
	return p
}

func (r *rig) stats() queue.Stats {
	r.t.Helper()
	s, err := r.q.Stats()
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// waitFor polls the agent's counters (a real server is involved, so there
// is no single event to await) until cond holds or the deadline passes.
func (r *rig) waitFor(what string, d time.Duration, cond func(queue.Stats) bool) queue.Stats {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for {
		s := r.stats()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("after %s: %s never happened; pending %d synced %d quarantined %d; connection %+v",
				d, what, s.Count(queue.Pending), s.Count(queue.Synced), s.Count(queue.Quarantined), r.e.Connection())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *rig) waitSynced(n int, d time.Duration) queue.Stats {
	r.t.Helper()
	return r.waitFor(fmt.Sprintf("%d synced", n), d, func(s queue.Stats) bool { return s.Count(queue.Synced) == uint64(n) })
}

// centralCounts counts RX_MOVEMENTS' messages and distinct subjects.
func centralCounts(t *testing.T, url string) (msgs uint64, subjects int) {
	t.Helper()
	nc := natstest.Connect(t, url)
	defer nc.Close()
	js := natstest.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(central.StreamSubjects))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs, len(info.State.Subjects)
}

// exactlyOnce checks that central holds each of n movements exactly once.
func exactlyOnce(t *testing.T, url string, n int) {
	t.Helper()
	msgs, subjects := centralCounts(t, url)
	if msgs != uint64(n) || subjects != n {
		t.Fatalf("central holds %d messages on %d subjects, want exactly %d of each", msgs, subjects, n)
	}
}

// noAttemptsCharged checks every pending or synced movement is at zero
// attempts — nothing was charged to any movement.
func noAttemptsCharged(t *testing.T, q *queue.Queue) {
	t.Helper()
	for _, r := range dlqtest.Pending(t, q) {
		if r.Attempts != 0 {
			t.Errorf("movement %s charged %d attempt(s) (%s)", r.KeyString(), r.Attempts, r.LastErrKind)
		}
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
