package sync

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/internal/natstest"
	"github.com/rxedge/agent/queue"
)

// TestPreemptedKeyIsNotCountedSynced has another identity publish, on a
// subject of its own, a message whose Nats-Msg-Id is one of this store's
// keys, before the agent sends it: central then answers the agent's
// publish "duplicate" without storing anything. The agent must check
// central's copy and keep the movement pending, never count it synced.
func TestPreemptedKeyIsNotCountedSynced(t *testing.T) {
	srv := natstest.StartHub(t)
	r := startRig(t, testOptions(t, srv.URL()), nil)
	r.stop()
	items := r.enqueue(0, 10)
	victim := items[3]
	js := natstest.JetStream(t, natstest.Connect(t, srv.URL()))
	m := nats.NewMsg(central.Subject("OTHER", "preempt"))
	m.Header.Set("Nats-Msg-Id", victim.KeyString())
	m.Data = []byte(`{}`)
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	r.start()
	r.waitFor("9 synced and central's copy of the tenth found missing", 20*time.Second, func(s queue.Stats) bool {
		return s.Count(queue.Synced) == 9 && r.e.Connection().LastErrorKind == "transient:not_readable"
	})
	e, err := r.q.Get(victim.Key)
	if err != nil {
		t.Fatal(err)
	}
	if e.State == queue.Synced {
		t.Fatalf("the pre-empted movement is %s", e.State)
	}
	if msgs, _ := centralCounts(t, srv.URL()); msgs != 10 { // nine and the other identity's
		t.Errorf("central holds %d messages, want 10", msgs)
	}
}
