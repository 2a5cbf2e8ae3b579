package powerloss

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/powerfs"
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

// restorePhase is a moment of a restored copy's start to cut the power
// at, told by the requests that change the identity marker: Confirm names
// both identities in it, commits the file's new identity, then names the
// new one alone.
type restorePhase struct {
	name string
	cut  func() func(powerfs.Op) bool // nil: a random request
	// marker is what the marker names after the cut: "old" (the backup's
	// identity alone), "both" (the backup's and another, with the file
	// still the backup's identity), "both-new" (the same, the file the
	// other), "new" (another identity alone); "" for any.
	marker string
}

// markerOp reports whether op is one of the marker's own: the creation of
// its temporary file or the rename over it.
func markerOp(op powerfs.Op, kind string) bool {
	switch kind {
	case "create":
		return op.Kind == "create" && op.Name == "agent.db"+queue.MarkerSuffix+".tmp"
	case "rename":
		return op.Kind == "rename" && strings.HasSuffix(op.Name, ">agent.db"+queue.MarkerSuffix)
	}
	return false
}

// afterNth cuts at the first request after the n-th marker rename and the
// directory sync that follows it.
func afterNth(n int) func() func(powerfs.Op) bool {
	return func() func(powerfs.Op) bool {
		renames, synced := 0, false
		return func(op powerfs.Op) bool {
			if synced {
				return true
			}
			if markerOp(op, "rename") {
				renames++
			}
			synced = renames == n && op.Kind == "fsyncdir"
			return false
		}
	}
}

var restorePhases = []restorePhase{
	{"before the marker names both identities", func() func(powerfs.Op) bool {
		return func(op powerfs.Op) bool { return markerOp(op, "rename") }
	}, "old"},
	{"the marker names both, the file its old identity", afterNth(1), "both"},
	{"the file committed its new identity, the marker names both", func() func(powerfs.Op) bool {
		creates := 0
		return func(op powerfs.Op) bool {
			if markerOp(op, "create") {
				creates++
			}
			return creates == 2
		}
	}, "both-new"},
	{"the marker names the new identity", afterNth(2), "new"},
	{"random", nil, ""},
}

// markerIs reports whether the marker beside the data file in dir names
// what want says (restorePhase.marker), old being the backup's identity
// and file the data file's after the cut.
func markerIs(t *testing.T, dir, want, old, file string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "agent.db"+queue.MarkerSuffix))
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(string(b))
	switch want {
	case "old":
		return len(ids) == 1 && ids[0] == old
	case "both":
		return len(ids) == 2 && ids[0] == old && ids[1] != old && file == old
	case "both-new":
		return len(ids) == 2 && ids[0] == old && ids[1] == file
	case "new":
		return len(ids) == 1 && ids[0] != old
	}
	return true
}

// TestPowerLossRestoredFile restores a data directory from a backup and
// cuts the power while the agent finds the file older than central's
// record and gives it a new identity: before the identity marker names
// both identities, after it, after the file committed its new one, after
// the marker names it alone, and at random. After each cut the marker
// must name the file beside it; the agent must start on what the cut
// left, deliver everything, and start again after that (a marker left
// naming the old identity refused that start as a replaced file), with
// no store sequence stored twice.
func TestPowerLossRestoredFile(t *testing.T) {
	r := newRig(t)
	r.hub = natstest.StartHub(t)
	js := natstest.JetStream(t, natstest.Connect(t, r.hub.URL()))
	client := &http.Client{}
	r.useDataDir(filepath.Join(r.mnt, "orig"))
	if !r.start(true) {
		t.Fatal("the power went off with no cut armed")
	}
	r.post(client, 20, "")
	r.waitStatus("the first movements synced", 30*time.Second, func(c counts) bool { return c.Pending.total() == 0 })
	r.kill()
	backup := t.TempDir()
	copyDir(t, backup, r.data)
	old, err := os.ReadFile(filepath.Join(backup, "agent.db"+queue.MarkerSuffix))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < cuts(len(restorePhases)); i++ {
		// Central moves on past the backup.
		if !r.start(true) {
			t.Fatalf("cut %d: the power went off with no cut armed", r.cuts)
		}
		r.post(client, 5, "")
		r.waitStatus("central ahead of the backup", 30*time.Second, func(c counts) bool { return c.Pending.total() == 0 })
		r.kill()

		phase := restorePhases[i%len(restorePhases)]
		r.useDataDir(filepath.Join(r.mnt, fmt.Sprintf("restored%02d", i)))
		copyDir(t, r.data, backup)
		r.armTorn()
		if phase.cut != nil {
			r.fs.CutWhen(phase.cut())
		} else {
			r.fs.CutAfter(1 + r.rnd.IntN(200))
		}
		if r.start(true) {
			r.loadUntilCut(2, 10*time.Second)
		}
		r.powerCycle()
		if !markerIs(t, r.data, phase.marker, strings.TrimSpace(string(old)), r.fileID) {
			t.Fatalf("cut %d: the power was not cut where phase %q is", r.cuts, phase.name)
		}
		for start := 1; start <= 2; start++ {
			if !r.start(true) {
				t.Fatalf("cut %d (%s): the power went off again with no cut armed", r.cuts, phase.name)
			}
			r.waitStatus("every acknowledged movement synced", 60*time.Second, func(c counts) bool {
				return c.Pending.total() == 0 && c.Synced.total() >= uint64(r.ackedCount())
			})
			if start == 2 {
				// The start's check with central confirms the file after
				// it opens, and nothing may be pending by then: wait for
				// the check itself.
				if l, ok := r.waitLineage(60 * time.Second); !ok || l.Origin != queue.OriginRestored {
					t.Fatalf("cut %d (%s): the second start's lineage %+v, want a confirmed restored file", r.cuts, phase.name, l)
				}
			}
			r.kill()
		}
		t.Logf("cut %d in phase %s: started twice after it", r.cuts, phase.name)
		checkCentralLineage(t, js, r.cuts)
	}
	r.summary()
}

// waitLineage polls the running agent's status, for at most d, until
// its start's lineage check with central has confirmed the data file; it
// returns the last lineage read and whether it was confirmed.
func (r *rig) waitLineage(d time.Duration) (status.FileLineage, bool) {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for {
		l := r.lineage()
		if l.Confirmed || time.Now().After(deadline) {
			return l, l.Confirmed
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lineage reads the data file's lineage from the running agent's status.
func (r *rig) lineage() status.FileLineage {
	r.t.Helper()
	resp, err := http.Get("http://" + r.addr + "/v1/status")
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st status.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.DataFile.Lineage == nil {
		r.t.Fatalf("status without the data file's lineage: %v", err)
	}
	return *st.DataFile.Lineage
}

// copyDir copies the regular files of from into to (created), each
// synced, and syncs to: a data directory put back from a backup.
func copyDir(t *testing.T, to, from string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o750); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(to, e.Name()), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := syncDir(to); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(filepath.Dir(to)); err != nil {
		t.Fatal(err)
	}
}
