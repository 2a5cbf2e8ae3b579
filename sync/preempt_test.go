package sync

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestPreemptedKeyIsNotCountedSynced has another identity publish, on a
// subject of its own, a message with one of this store's Nats-Msg-Ids
// before the agent sends that movement. Central's duplicate window spans
// the stream, so such a publish makes central answer the agent's own
// "duplicate" without storing anything.
//
// With the key alone (what another store can guess), nothing happens: the
// agent's id also holds the payload's digest, so all ten are stored at
// once. With the whole id (which needs the payload), the agent must check
// central's copy and keep the movement pending, never count it synced.
func TestPreemptedKeyIsNotCountedSynced(t *testing.T) {
	for _, tc := range []struct {
		name  string
		id    func(movement.Prepared) string
		check func(t *testing.T, r *rig, victim movement.Prepared, srv *natstest.Server)
	}{
		{"guessed key", func(v movement.Prepared) string { return v.KeyString() },
			func(t *testing.T, r *rig, _ movement.Prepared, srv *natstest.Server) {
				r.waitFor("all 10 synced", 20*time.Second, func(s queue.Stats) bool { return s.Count(queue.Synced) == 10 })
				if msgs, _ := centralCounts(t, srv.URL()); msgs != 11 { // ten and the other identity's
					t.Errorf("central holds %d messages, want 11", msgs)
				}
			}},
		{"whole id", func(v movement.Prepared) string { return central.MsgID(v.KeyString(), hex.EncodeToString(v.Digest[:])) },
			func(t *testing.T, r *rig, victim movement.Prepared, srv *natstest.Server) {
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
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.StartHub(t)
			r := startRig(t, testOptions(t, srv.URL()), nil)
			r.stop()
			items := r.enqueue(0, 10)
			victim := items[3]
			js := natstest.JetStream(t, natstest.Connect(t, srv.URL()))
			m := nats.NewMsg(central.Subject("OTHER", "preempt"))
			m.Header.Set(central.HeaderMsgID, tc.id(victim))
			m.Data = []byte(`{}`)
			if _, err := js.PublishMsg(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			r.start()
			tc.check(t, r, victim, srv)
		})
	}
}
