package remote_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/syncbuf"
)

// store is one agent's data file and responder, on its own connection to
// a real server.
type store struct {
	t    *testing.T // the test that owns the store's connections
	id   string
	url  string
	q    *queue.Queue
	svc  *dlq.Service
	nc   *nats.Conn
	keys []string // quarantined at start
	logs *syncbuf.Buffer
	opts remote.Options
}

// startStore opens a data file with n quarantined movements and subscribes
// a responder for store id, which trusts operatorKeys.
func startStore(t *testing.T, url, id string, operatorKeys []string, n int) *store {
	t.Helper()
	return startStoreWith(t, url, id, operatorKeys, n, nil)
}

// startStoreWith is startStore with options changed by set.
func startStoreWith(t *testing.T, url, id string, operatorKeys []string, n int, set func(*remote.Options)) *store {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	s := &store{t: t, id: id, url: url, q: q, svc: dlq.New(q), logs: &syncbuf.Buffer{}}
	for i := range n {
		s.keys = append(s.keys, quarantine(t, q, id, fmt.Sprintf("M%03d", i), ""))
	}
	srv := control.New(control.Options{Queue: q, StoreID: id})
	s.opts = remote.Options{
		Queue: q, DLQ: s.svc, StoreID: id, OperatorKeys: operatorKeys, Status: srv.Status,
		Logger: slog.New(slog.NewJSONHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if set != nil {
		set(&s.opts)
	}
	s.start()
	return s
}

// start subscribes a new responder over the store's file, on a new
// connection: what an agent does when it starts.
func (s *store) start() {
	t := s.t
	t.Helper()
	s.nc = natstest.Connect(t, s.url, nats.CustomInboxPrefix(central.InboxPrefix(s.id)))
	if err := remote.New(s.opts).Subscribe(s.nc); err != nil {
		t.Fatalf("subscribe %s: %v", s.id, err)
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// restart closes the store's connection and starts a new responder.
func (s *store) restart(t *testing.T) {
	t.Helper()
	s.nc.Close()
	s.start()
}

// quarantine puts one movement in the quarantine as too large and returns
// its key. extra adds JSON fields to the movement.
func quarantine(t *testing.T, q *queue.Queue, storeID, id, extra string) string {
	t.Helper()
	js := fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"%s}`, id, extra)
	p, es := movement.Prepare([]byte(js), storeID, time.Now())
	if es != nil {
		t.Fatalf("prepare %s: %v", id, es)
	}
	res, err := q.Enqueue([]movement.Prepared{p})
	if err != nil {
		t.Fatal(err)
	}
	leased, err := q.Lease(time.Now().Add(time.Second), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var others []uint64
	for _, r := range leased {
		if r.Seq != res[0].Seq {
			others = append(others, r.Seq)
		}
	}
	q.Release(others...)
	err = q.Settle(queue.Settlement{Quarantines: []queue.QuarantineAt{{
		Seq: res[0].Seq, Reason: "permanent:too_large", Charge: true, ConnState: "online", AgentVersion: "test",
		Failure: queue.Failure{Kind: "permanent:too_large", Text: "nats: maximum payload exceeded"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return p.KeyString()
}

// requarantine puts a pending movement back in the quarantine.
func (s *store) requarantine(t *testing.T, key string) {
	t.Helper()
	leased, err := s.q.Lease(time.Now().Add(time.Hour), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var others []uint64
	var seq uint64
	for _, r := range leased {
		if r.KeyString() == key {
			seq = r.Seq
		} else {
			others = append(others, r.Seq)
		}
	}
	s.q.Release(others...)
	if seq == 0 {
		t.Fatalf("key %s is not pending", key)
	}
	err = s.q.Settle(queue.Settlement{Quarantines: []queue.QuarantineAt{{Seq: seq, Reason: "permanent:too_large", Charge: true, ConnState: "online", AgentVersion: "test",
		Failure: queue.Failure{Kind: "permanent:too_large", Text: "nats: maximum payload exceeded"}}}})
	if err != nil {
		t.Fatal(err)
	}
}

// state is where a key is in the store's queue.
func (s *store) state(t *testing.T, key string) string {
	t.Helper()
	k, ok := movement.ParseKey(key)
	if !ok {
		t.Fatalf("bad key %q", key)
	}
	e, err := s.q.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	return e.State.String()
}

// events are the store's journal events of action.
func (s *store) events(t *testing.T, action string) []queue.Event {
	t.Helper()
	var out []queue.Event
	err := s.q.Events(time.Time{}, func(e queue.Event) bool {
		if e.Action == action {
			out = append(out, e)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sendRaw sends data to subject and decodes the reply.
func sendRaw(t *testing.T, nc *nats.Conn, subject string, data []byte) command.Reply {
	t.Helper()
	m, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	var r command.Reply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatalf("reply %q: %v", m.Data, err)
	}
	return r
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
