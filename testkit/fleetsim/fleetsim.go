// Package fleetsim runs stores in process, for tests and benchmarks of
// head office's fleet-wide actions where a built agent per store would be
// too heavy: each store is a real data file (queue over bbolt) with
// quarantined movements, the agent's own responder (remote.Responder)
// subscribed on a NATS connection of its own, and its summary in the
// fleet view, written as the agent writes it (remote.PublishSummary).
// Nothing is imitated but the sender: quarantined movements are put there
// as the settler puts them, and a redrive only makes them pending.
package fleetsim

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
)

// Store is one store run in process.
type Store struct {
	ID    string
	Queue *queue.Queue
	// Keys are its quarantined movements' keys.
	Keys []string
	nc   *nats.Conn
	opts remote.Options
	resp *remote.Responder
}

// Options say how a store is run.
type Options struct {
	// URL is central's.
	URL string
	// Dir holds the stores' data files (one file per store).
	Dir string
	// OperatorKeys may sign the store's commands.
	OperatorKeys []string
	// Quarantined is how many movements each store holds quarantined.
	Quarantined int
}

// Start opens store id's data file with o.Quarantined quarantined
// movements, subscribes its responder and publishes its summary.
func Start(ctx context.Context, o Options, id string) (*Store, error) {
	q, err := queue.Open(queue.Options{Path: filepath.Join(o.Dir, id+".db"), StoreID: id})
	if err != nil {
		return nil, err
	}
	s := &Store{ID: id, Queue: q}
	for i := range o.Quarantined {
		k, err := quarantine(q, id, fmt.Sprintf("M%05d", i))
		if err != nil {
			q.Close()
			return nil, err
		}
		s.Keys = append(s.Keys, k)
	}
	srv := control.New(control.Options{Queue: q, StoreID: id})
	s.opts = remote.Options{Queue: q, DLQ: dlq.New(q), StoreID: id, OperatorKeys: o.OperatorKeys, Status: srv.Status}
	s.nc, err = nats.Connect(o.URL, nats.CustomInboxPrefix(central.InboxPrefix(id)), nats.MaxReconnects(-1))
	if err == nil {
		s.resp = remote.New(s.opts)
		err = s.resp.Subscribe(s.nc)
	}
	if err == nil {
		err = s.nc.Flush()
	}
	if err == nil {
		err = s.PublishSummary(ctx)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("fleetsim: start store %s: %w", id, err)
	}
	return s, nil
}

// PublishSummary writes the store's summary into the fleet view, as the
// agent's heartbeat does.
func (s *Store) PublishSummary(ctx context.Context) error {
	st, err := s.opts.Status()
	if err != nil {
		return err
	}
	return remote.PublishSummary(ctx, s.nc, s.ID, st)
}

// Pending counts the store's pending movements.
func (s *Store) Pending() (uint64, error) {
	st, err := s.opts.Status()
	if err != nil {
		return 0, err
	}
	return st.Counts.Pending.Total, nil
}

// Close stops the responder and closes the connection and the file.
func (s *Store) Close() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.resp != nil {
		s.resp.Close()
	}
	s.Queue.Close()
}

// quarantine puts one movement in the quarantine as too large, as the
// settler does when central refuses it, and returns its key.
func quarantine(q *queue.Queue, store, id string) (string, error) {
	body := fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, id)
	p, es := movement.Prepare([]byte(body), store, time.Now())
	if es != nil {
		return "", fmt.Errorf("prepare %s: %v", id, es)
	}
	res, err := q.Enqueue([]movement.Prepared{p})
	if err != nil {
		return "", err
	}
	leased, err := q.Lease(time.Now().Add(time.Second), 1<<20)
	if err != nil {
		return "", err
	}
	var others []uint64
	for _, r := range leased {
		if r.Seq != res[0].Seq {
			others = append(others, r.Seq)
		}
	}
	q.Release(others...)
	err = q.Settle(queue.Settlement{Quarantines: []queue.QuarantineAt{{
		Seq: res[0].Seq, Reason: "permanent:too_large", Charge: true, ConnState: "online", AgentVersion: "fleetsim",
		Failure: queue.Failure{Kind: "permanent:too_large", Text: "nats: maximum payload exceeded"},
	}}})
	return p.KeyString(), err
}
