package powerloss

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

// checkLog checks, on the file as the power cut left it (opened read-only,
// before an open could start a new log over a broken one), that the
// store's log and its queue agree: the log ends where the queue's logged
// sequences end, its root is the root of the movements the file holds for
// its sequences, every checkpoint of the log covers only logged
// sequences with that prefix's root (so none covers a movement that was
// not acknowledged: a leaf is committed with its movement), and every
// checkpoint the file says central acknowledged is held by central.
func (r *rig) checkLog(path string) {
	t := r.t
	t.Helper()
	if !initialized(t, path) {
		return // its creation was cut: check() finds whether that is allowed
	}
	q, err := queue.Open(queue.Options{Path: path, StoreID: storeID, ReadOnly: true})
	if errors.Is(err, queue.ErrOldLayout) {
		return // an upgrade from schema 2, which kept no log, was cut: the next start finishes it (TestPowerLossDuringUpgrade)
	}
	if err != nil {
		t.Fatalf("cut %d: the data file does not open read-only after the power cut: %v", r.cuts, err)
	}
	defer q.Close()
	if err := q.CheckLog(); err != nil {
		t.Fatalf("cut %d: the log and the queue disagree after the power cut: %v", r.cuts, err)
	}
	st, err := q.Ledger()
	if err != nil {
		t.Fatal(err)
	}
	cps, err := q.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	r.logSize, r.checkpoints = st.Size, len(cps)
	if r.hub == nil {
		return
	}
	js := natstest.JetStream(t, natstest.Connect(t, r.hub.URL()))
	stream, err := js.Stream(context.Background(), central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cps {
		if !c.Published {
			continue
		}
		if _, err := stream.GetLastMsgForSubject(context.Background(), central.Subject(storeID, ledger.CheckpointToken(c.Log, c.Size))); err != nil {
			t.Fatalf("cut %d: checkpoint %s/%d is marked published and central does not hold it: %v", r.cuts, c.Log, c.Size, err)
		}
	}
}

// waitLedger polls the agent's status until a checkpoint of its log was
// signed and published (what is awaited: ledger.published > 0).
func (r *rig) waitLedger(limit time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	var last *status.Ledger
	for {
		resp, err := http.Get("http://" + r.addr + "/v1/status")
		if err == nil {
			var st status.Status
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && st.Ledger != nil {
				last = st.Ledger
				if last.Published > 0 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("cut %d: no checkpoint published after %s (ledger %+v)", r.cuts, limit, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPowerLossDuringCheckpoints cuts the power while movements arrive,
// are sent to central and checkpoints of the log are signed and published
// every second: after every cut the log and the queue agree, and no
// checkpoint covers a movement that was not acknowledged (checkLog).
func TestPowerLossDuringCheckpoints(t *testing.T) {
	r := newRig(t)
	r.hub = natstest.StartHub(t)
	// Checkpoints every second, so cuts fall while they are signed and
	// published too.
	if err := os.WriteFile(r.cfg, []byte("sync:\n  resume_jitter: 10ms\nledger:\n  checkpoint_interval: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{}
	for i := 0; i < cuts(2); i++ {
		if !r.start(true) {
			r.powerCycle()
			continue
		}
		r.post(client, 20, "")
		r.waitLedger(30 * time.Second)
		r.arm(3000)
		r.loadUntilCut(2, 5*time.Second)
		r.powerCycle()
	}
	r.summary()
	if r.checkpoints == 0 {
		t.Fatal("no checkpoint was signed in the whole run: the scenario did not test what it is for")
	}
}

// movementsHeld counts the messages central holds on the store's
// subjects that are movements, not its checkpoints.
func movementsHeld(t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(central.Subject(storeID, ">")))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for subj, c := range info.State.Subjects {
		if !ledger.IsCheckpointToken(subj[strings.LastIndexByte(subj, '.')+1:]) {
			n += c
		}
	}
	return n
}

// initialized reports whether the file at path got its first transaction
// (a cut while the file is created leaves a bbolt file without it, or an
// empty one, which check() judges).
func initialized(t *testing.T, path string) bool {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return false
	}
	defer db.Close()
	ok := false
	db.View(func(tx *bolt.Tx) error {
		ok = tx.Bucket([]byte("meta")) != nil
		return nil
	})
	return ok
}
