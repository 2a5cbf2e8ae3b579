package powerloss

import (
	"net/http"
	"testing"
	"time"

	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/powerfs"
)

// compactFile is the name of the new file a compaction writes.
const compactFile = "agent.db" + queue.CompactSuffix

// compactPhase is a moment of `agent compact` to cut the power at, told by
// the filesystem requests it makes (see queue.Compact's steps).
type compactPhase struct {
	name string
	// cut returns the predicate for CutWhen; nil cuts the power as soon as
	// the compaction completed, or at a random request.
	cut func(writes int) func(powerfs.Op) bool
}

var compactPhases = []compactPhase{
	{"journaled", nil}, // first: it also measures a compaction
	{"locked", func(int) func(powerfs.Op) bool {
		return func(powerfs.Op) bool { return true }
	}},
	{"copying", nil}, // set per run: a random write of the copy
	{"copied", func(int) func(powerfs.Op) bool {
		return func(op powerfs.Op) bool { return op.Kind == "fsync" && op.Name == compactFile }
	}},
	{"verified", func(int) func(powerfs.Op) bool {
		return func(op powerfs.Op) bool { return op.Kind == "rename" }
	}},
	{"renamed", func(int) func(powerfs.Op) bool {
		renamed := false
		return func(op powerfs.Op) bool {
			cut := renamed
			renamed = renamed || op.Kind == "rename"
			return cut
		}
	}},
	{"dirsynced", func(int) func(powerfs.Op) bool {
		renamed, synced := false, false
		return func(op powerfs.Op) bool {
			cut := synced
			synced = synced || renamed && op.Kind == "fsyncdir"
			renamed = renamed || op.Kind == "rename"
			return cut
		}
	}},
}

// TestPowerLossDuringCompaction cuts the power in every phase of `agent
// compact` (after the lock, during the copy, before the new file's fsync,
// before the rename, between the rename and the directory's fsync, after
// it, once the compaction is journalled) and at random moments of a
// compaction followed by new movements in the compacted file.
func TestPowerLossDuringCompaction(t *testing.T) {
	r := newRig(t)
	r.hub = natstest.StartHub(t)
	client := &http.Client{}
	// A file with free pages: movements that were synced and left pending.
	if !r.start(true) {
		t.Fatal("the power went off with no cut armed")
	}
	for i := 0; i < 10; i++ {
		r.post(client, 100, "")
	}
	r.waitStatus("the backlog drained", 30*time.Second, func(c counts) bool { return c.Pending.total() == 0 })
	r.kill()

	compactions := 0
	writes, ops := 0, 0 // of one compaction, measured in the first round
	for i := 0; i < cuts(len(compactPhases)); i++ {
		phase := compactPhase{name: "random"}
		if i < len(compactPhases) {
			phase = compactPhases[i]
		}
		r.armTorn()
		switch {
		case phase.name == "journaled":
			r.fs.Trace(true)
		case phase.name == "copying":
			nth, seen := 1+r.rnd.IntN(max(writes, 1)), 0
			r.fs.CutWhen(func(op powerfs.Op) bool {
				if op.Kind == "write" && op.Name == compactFile {
					seen++
				}
				return seen >= nth
			})
		case phase.cut != nil:
			r.fs.CutWhen(phase.cut(writes))
		default:
			// Anywhere in the compaction or the new movements after it.
			r.fs.CutAfter(1 + r.rnd.IntN(ops+100))
		}
		off := r.fs.Off()
		before := r.fs.Seq()
		code, out, errOut := r.cli("compact", "--force", "--data-dir", r.data)
		select {
		case <-off:
		default:
			if code != 0 {
				t.Fatalf("cut %d (%s): agent compact, with the power on: exit %d\n%s%s", r.cuts, phase.name, code, out, errOut)
			}
		}
		if code == 0 {
			compactions++
			r.expectAfter(expectation{what: "agent compact", action: queue.ActionCompact, count: compactions})
		}
		if phase.name == "journaled" {
			// Cut as soon as the compaction completed.
			ops = r.fs.Seq() - before
			for _, op := range r.fs.Traced() {
				if op.Kind == "write" && op.Name == compactFile {
					writes++
				}
			}
			r.fs.Trace(false)
		} else if r.start(false) {
			// New movements go into the compacted file.
			for j := 0; j < 10; j++ {
				r.post(client, 10, "")
			}
		}
		r.powerCycle()
		if i < len(compactPhases) {
			t.Logf("cut %d in phase %s: %d compactions completed so far", r.cuts, phase.name, compactions)
		}
	}
	r.summary()
}
