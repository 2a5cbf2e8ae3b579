package powerloss

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestPowerLossFileIdentity cuts the power while the agent creates a data
// file and gives it its identity, writes the identity marker beside it,
// asks central for the store's record and renumbers what it accepted
// meanwhile, and while the first movements arrive. Every round is a new
// data directory of the same store, as a replaced PC is: after each cut
// the check also requires a marker to name the file beside it (never a
// file that is gone), and the agent must start again on what the cut left
// (no refusal), drain, and leave central with no store sequence stored
// twice and every movement carrying its file's identity.
func TestPowerLossFileIdentity(t *testing.T) {
	r := newRig(t)
	r.hub = natstest.StartHub(t)
	js := natstest.JetStream(t, natstest.Connect(t, r.hub.URL()))
	for i := 0; i < cuts(4); i++ {
		r.useDataDir(filepath.Join(r.mnt, fmt.Sprintf("id%02d", i)))
		r.arm(40 + r.rnd.IntN(200))
		if r.start(true) {
			r.loadUntilCut(3, 10*time.Second)
		}
		r.powerCycle()
		// The agent starts on what the cut left and delivers everything.
		if !r.start(true) {
			t.Fatalf("cut %d: the power went off again with no cut armed", r.cuts)
		}
		r.waitStatus("every acknowledged movement synced", 60*time.Second, func(c counts) bool {
			return c.Pending.total() == 0 && c.Synced.total() >= uint64(r.ackedCount())
		})
		r.kill()
		checkCentralLineage(t, js, r.cuts)
	}
	r.summary()
}

func (r *rig) ackedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked)
}

// checkCentralLineage reads every movement of the store in central: no
// sequence twice, and every movement names the file that gave it.
func checkCentralLineage(t *testing.T, js jetstream.JetStream, cut int) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	n := s.CachedInfo().State.Msgs
	if n == 0 {
		return
	}
	cons, err := js.OrderedConsumer(ctx, central.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{central.Subject(storeID, ">")}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]string{}
	files := map[string]bool{}
	for range n {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("cut %d: read central: %v", cut, err)
		}
		if ledger.IsCheckpointToken(m.Headers().Get(central.HeaderMsgID)) {
			continue // the store's checkpoint, not a movement
		}
		seq, _ := strconv.ParseUint(m.Headers().Get(central.HeaderSeq), 10, 64)
		file := m.Headers().Get(central.HeaderFile)
		if file == "" {
			t.Fatalf("cut %d: movement with sequence %d has no %s header", cut, seq, central.HeaderFile)
		}
		if other, dup := seen[seq]; dup {
			t.Fatalf("cut %d: sequence %d stored twice (files %s and %s)", cut, seq, other, file)
		}
		seen[seq] = file
		files[file] = true
	}
	t.Logf("cut %d: central holds %d movements from %d data files, no sequence twice", cut, len(seen), len(files))
}
