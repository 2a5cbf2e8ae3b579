package dlq

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/dlqtest"
)

const testStore = "S0042"

// clock is a settable test clock.
type clock = dlqtest.Clock

func newClock() *clock { return dlqtest.NewClock() }

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
	return dlqtest.ReopenReadOnly(t, f.q)
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
	return dlqtest.Enqueue(t, f.q, f.clk.Now(), movementJSON(s))
}

// quarantine puts each movement in the quarantine, one minute apart, and
// returns their keys in order (oldest quarantine first).
func (f *fixture) quarantine(t *testing.T, specs ...spec) []string {
	t.Helper()
	keys := make([]string, len(specs))
	for i, s := range specs {
		keys[i] = dlqtest.Quarantine(t, f.q, f.clk.Now(), movementJSON(s), s.reason)
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
	return dlqtest.State(t, f.q, key)
}

func (f *fixture) events(t *testing.T, action string) []queue.Event {
	t.Helper()
	return dlqtest.Events(t, f.q, action)
}

func (f *fixture) verify(t *testing.T) {
	t.Helper()
	if err := f.q.Verify(); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
