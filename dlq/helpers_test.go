package dlq

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

const testStore = "S0042"

// clock is a settable test clock.
type clock struct {
	mu  stdsync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fixture is a real data file in a temporary directory with a Service
// over it. The queue and the service share the test clock.
type fixture struct {
	dir string
	clk *clock
	q   *queue.Queue
	svc *Service
}

// reopenReadOnly closes the fixture's queue and opens its file read-only,
// as a CLI command does while the agent is stopped.
func (f *fixture) reopenReadOnly(t *testing.T) *queue.Queue {
	t.Helper()
	f.q.Close()
	ro, err := queue.Open(queue.Options{Path: f.q.Path(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	return ro
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	clk := newClock()
	q, err := queue.Open(queue.Options{Path: filepath.Join(dir, "agent.db"), StoreID: testStore, Clock: clk.Now})
	if err != nil {
		t.Fatalf("queue.Open: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	svc := New(q)
	svc.clock = clk.Now
	return &fixture{dir: dir, clk: clk, q: q, svc: svc}
}

// spec describes one movement to put in the quarantine.
type spec struct {
	id       string
	schedule string
	reason   string // "permanent:too_large" by default
	rxRef    string
	note     string
}

func movementJSON(s spec) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"`, s.id)
	if s.schedule != "" {
		fmt.Fprintf(&b, `,"schedule":%q`, s.schedule)
	}
	if s.rxRef != "" {
		fmt.Fprintf(&b, `,"rx_ref":%q`, s.rxRef)
	}
	if s.note != "" {
		fmt.Fprintf(&b, `,"note":%q`, s.note)
	}
	b.WriteString("}")
	return b.String()
}

// enqueue stores one pending movement and returns its key and sequence.
func (f *fixture) enqueue(t *testing.T, s spec) (string, uint64) {
	t.Helper()
	p, es := movement.Prepare([]byte(movementJSON(s)), testStore, f.clk.Now())
	if es != nil {
		t.Fatalf("prepare %s: %v", s.id, es)
	}
	res, err := f.q.Enqueue([]movement.Prepared{p})
	if err != nil {
		t.Fatalf("enqueue %s: %v", s.id, err)
	}
	return p.KeyString(), res[0].Seq
}

// quarantine puts each movement in the quarantine, one minute apart, and
// returns their keys in order (oldest quarantine first).
func (f *fixture) quarantine(t *testing.T, specs ...spec) []string {
	t.Helper()
	keys := make([]string, len(specs))
	for i, s := range specs {
		key, seq := f.enqueue(t, s)
		leased, err := f.q.Lease(f.clk.Now(), 1<<20)
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		var others []uint64
		for _, r := range leased {
			if r.Seq != seq {
				others = append(others, r.Seq)
			}
		}
		f.q.Release(others...)
		reason := s.reason
		if reason == "" {
			reason = "permanent:too_large"
		}
		kind := reason[strings.Index(reason, ":")+1:]
		err = f.q.Quarantine([]queue.QuarantineAt{{
			Seq:          seq,
			Failure:      queue.Failure{Kind: "permanent:" + kind, Text: "central refused the movement: " + kind},
			Reason:       reason,
			Charge:       true,
			ConnState:    "online",
			AgentVersion: "1.2.3-test",
		}})
		if err != nil {
			t.Fatalf("quarantine %s: %v", s.id, err)
		}
		keys[i] = key
		f.clk.Add(time.Minute)
	}
	return keys
}

// many returns n specs with ids prefix-0001, ...
func many(prefix string, n int) []spec {
	out := make([]spec, n)
	for i := range out {
		out[i] = spec{id: fmt.Sprintf("%s-%04d", prefix, i+1)}
	}
	return out
}

func (f *fixture) state(t *testing.T, key string) queue.State {
	t.Helper()
	k, ok := movement.ParseKey(key)
	if !ok {
		t.Fatalf("bad key %q", key)
	}
	e, err := f.q.Get(k)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	return e.State
}

func (f *fixture) events(t *testing.T, action string) []queue.Event {
	t.Helper()
	var out []queue.Event
	if err := f.q.Events(time.Time{}, func(e queue.Event) bool {
		if action == "" || e.Action == action {
			out = append(out, e)
		}
		return true
	}); err != nil {
		t.Fatalf("Events: %v", err)
	}
	return out
}

func (f *fixture) verify(t *testing.T) {
	t.Helper()
	if err := f.q.Verify(); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

// handler is the control socket's handler with the dlq routes over q.
func handler(q *queue.Queue, svc *Service) http.Handler {
	srv := control.New(control.Options{Queue: q, StoreID: q.StoreID(), Routes: func(mux *http.ServeMux) { Register(mux, svc) }})
	return srv.ControlHandler()
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
