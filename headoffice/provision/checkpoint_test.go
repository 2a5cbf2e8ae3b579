package provision_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
)

// checkpointMsg is a store's checkpoint as its agent publishes it
// (central/ledger; the headers of notary.Msg), with body data.
func checkpointMsg(store, log string, size int64, data string) *nats.Msg {
	tok := ledger.CheckpointToken(log, size)
	m := nats.NewMsg(central.Subject(store, tok))
	m.Data = []byte(data)
	m.Header.Set(central.HeaderMsgID, ledger.CheckpointMsgID(tok, m.Data))
	m.Header.Set(central.HeaderExpectLast, "0")
	m.Header.Set(central.HeaderStore, store)
	return m
}

// TestProductionConfigCheckpoints: with the generated configuration a
// store publishes its own checkpoints and cannot publish one under
// another store's subjects, nor, by guessing its token, take the message
// id of another store's checkpoint before it.
func TestProductionConfigCheckpoints(t *testing.T) {
	for _, n := range layouts {
		t.Run(fmt.Sprintf("partitions=%d", n), func(t *testing.T) {
			h := startProduction(t, n)
			a := dial(t, h.URL(), storeA)
			b := dial(t, h.URL(), storeB)
			const logB = "00000000000000bb"

			// A's own checkpoint is stored in A's stream.
			ack, err := a.js.PublishMsg(testContext(t), checkpointMsg("S0001", "00000000000000aa", 3, `{"note":"a"}`), jetstream.WithRetryAttempts(0))
			if err != nil || ack.Stream != stream("S0001", n) || ack.Duplicate {
				t.Fatalf("A publishes its checkpoint: %+v, %v", ack, err)
			}

			// A forges a checkpoint on B's subject: a permissions violation.
			forged := checkpointMsg("S0002", logB, 3, `{"note":"forged"}`)
			if err := a.nc.PublishMsg(forged); err != nil {
				t.Fatal(err)
			}
			a.wantViolation(t, fmt.Sprintf("Publish to %q", forged.Subject))

			// A guesses the token of B's next checkpoint and publishes, on
			// its own subject, with the message id a token alone would
			// give: B's checkpoint is stored all the same, not answered
			// "duplicate".
			guess := checkpointMsg("S0001", logB, 4, `{"note":"guess"}`)
			guess.Header.Set(central.HeaderMsgID, ledger.CheckpointToken(logB, 4))
			if _, err := a.js.PublishMsg(testContext(t), guess, jetstream.WithRetryAttempts(0)); err != nil {
				t.Fatalf("A publishes on its own subject: %v", err)
			}
			ack, err = b.js.PublishMsg(testContext(t), checkpointMsg("S0002", logB, 4, `{"note":"b"}`), jetstream.WithRetryAttempts(0))
			if err != nil || ack.Duplicate || ack.Stream != stream("S0002", n) {
				t.Fatalf("B's checkpoint after A's guess: %+v, %v; want it stored", ack, err)
			}
		})
	}
}
