package powerloss

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/testkit/natstest"
)

// asapRecords is the records of each file of the ASAP scenario.
const asapRecords = 300

// asapFile is ASAP 4.2B file number f: asapRecords dispenses, and the
// movement ids the agent gives them.
func asapFile(f int) ([]byte, []string) {
	var b strings.Builder
	ctl := fmt.Sprintf("PL%03d", f)
	fmt.Fprintf(&b, "TH*4.2B*%s*01**20260302*101500*P**~~\nIS*5550001111*PHARMACY*~\nPHA*1234567893*3312345*BS1234563~\n", ctl)
	ids := make([]string, asapRecords)
	for i := range ids {
		rx := fmt.Sprintf("RX%03d%05d", f, i)
		fmt.Fprintf(&b, "PAT*NY*06*ID*******DOE*JANE~\nDSP*00*%s*20260301*0*20260301*00*01*00406055262*%d*30*01~\nPRE*1987654321*AB1234563~\n", rx, 1+i%90)
		ids[i] = "asap:" + rx + ":0:20260301"
	}
	fmt.Fprintf(&b, "TP*%d~\nTT*%s*%d~\n", 3*asapRecords+2, ctl, 3*asapRecords+5)
	return []byte(b.String()), ids
}

// writeDurably writes a file as a careful sender does: under a .tmp name,
// fsynced, renamed in, the folder fsynced.
func writeDurably(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// TestPowerLossDuringASAPFile cuts the power while the agent takes ASAP
// files from a drop folder on the powerfs mount (half the time while it
// also drains to central): every dispense of a file seen in done/ is held
// after the cut, and the file is in done/ or back in the folder; a file the
// agent reported done is still in done/; a file cut mid-way is taken again
// after the restart; and at the end central holds every dispense of every
// file once.
func TestPowerLossDuringASAPFile(t *testing.T) {
	r := newRig(t)
	r.hub = natstest.StartHub(t)
	dir := filepath.Join(r.mnt, "asap")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(r.mnt); err != nil {
		t.Fatal(err)
	}
	form := filepath.Join(t.TempDir(), "formulary.csv")
	if err := os.WriteFile(form, []byte("ndc,schedule\n00406-0552-62,CII\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("sync:\n  resume_jitter: 10ms\nintake:\n  formulary: %s\n  asap:\n    dir: %s\n    poll_interval: 20ms\n", form, dir)
	if err := os.WriteFile(r.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	written := map[string][]string{} // file name → its movement ids, for files handed over
	for i := 0; i < cuts(4); i++ {
		// The files this run of the agent takes before this round's: those
		// left in the folder by earlier rounds.
		before := dropped(t, dir)
		if !r.start(i%2 == 1) {
			t.Fatalf("cut %d: the power went off with no cut armed", r.cuts)
		}
		name := fmt.Sprintf("f%03d.asap", i)
		body, ids := asapFile(i)
		// A take costs about a hundred filesystem requests: the cut lands
		// while the sender writes, while the agent stores, or while it moves
		// the file; every other pair of rounds, more often after the file
		// reached done/.
		r.arm(150 + 450*(i/2%2))
		// Half the rounds cut the power as soon as the file shows in done/,
		// when the agent may not have made the move durable yet; the others
		// once the agent reported the file done.
		untilReported := r.rnd.IntN(2) == 0
		if err := writeDurably(filepath.Join(dir, name), body); err != nil {
			// The power went off while the sender wrote: the file was not
			// handed over (it may or may not be there after the cut).
			r.powerCycle()
			continue
		}
		written[name] = ids
		done := filepath.Join(dir, "done", name)
		off := r.fs.Off()
		deadline := time.Now().Add(30 * time.Second)
		seen, outcome := false, "before "+name+" showed in done/"
	wait:
		for {
			if _, err := os.Stat(done); err == nil && !seen {
				// The agent moves a file only once every dispense of it
				// is in an fsynced commit: they must all survive. A rename
				// shows before it is durable, so until the agent reports
				// the move, a cut may bring the file back to the folder
				// (to be taken again), never make it vanish.
				seen, outcome = true, "after "+name+" showed in done/"
				r.mu.Lock()
				for _, id := range ids {
					r.acked[id] = movement.KeyString(storeID, id)
				}
				r.totalAcks += len(ids)
				r.mu.Unlock()
				r.expectAfter(expectation{what: name + " seen in done/", file: done, orFile: filepath.Join(dir, name), content: []string{"TT*PL"}})
				if !untilReported {
					break
				}
			}
			if seen && r.filesDone() > before {
				// Reported done: the move is durable.
				r.expectAfter(expectation{what: name + " reported done", file: done, content: []string{"TT*PL"}})
				outcome = "after " + name + " was reported done"
				break
			}
			select {
			case <-off:
				break wait
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("cut %d: %s not reported done after 30s with the power on (seen in done/: %v)\n%s", r.cuts, name, seen, r.agent.stderr)
			}
			time.Sleep(5 * time.Millisecond)
		}
		r.powerCycle()
		t.Logf("cut %d: the power went off %s", r.cuts, outcome)
	}
	// After the last cut: every file handed over, or kept by the cut, is
	// taken, and central stores each of its dispenses once.
	if !r.start(true) {
		t.Fatal("the power went off with no cut armed")
	}
	for name := range written {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			if _, err := os.Stat(filepath.Join(dir, "done", name)); err != nil {
				t.Fatalf("%s was written durably and is neither in the folder nor in done/", name)
			}
		}
	}
	// A file whose sender's write the cut interrupted may have survived
	// whole (the cut came after its rename reached the disk): it is taken
	// like the others. The dispenses due in central are those of every
	// file in done/ once the agent has taken all it will.
	want := map[string]bool{}
	r.waitStatus("every file taken and its dispenses synced", time.Minute, func(c counts) bool {
		want = map[string]bool{}
		for i := 0; i < cuts(4); i++ {
			name := fmt.Sprintf("f%03d.asap", i)
			if _, err := os.Stat(filepath.Join(dir, "done", name)); err != nil {
				continue
			}
			_, ids := asapFile(i)
			for _, id := range ids {
				want[id] = true
			}
		}
		for name := range written {
			if _, err := os.Stat(filepath.Join(dir, "done", name)); err != nil {
				return false
			}
		}
		return c.Synced.total() == uint64(len(want)) && c.Pending.total() == 0
	})
	for name := range written {
		if _, err := os.Stat(filepath.Join(dir, "done", name)); err != nil {
			t.Errorf("%s is not in done/ at the end: %v", name, err)
		}
	}
	js := natstest.JetStream(t, natstest.Connect(t, r.hub.URL()))
	s, err := js.Stream(context.Background(), central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if n := movementsHeld(t, s); n != uint64(len(want)) {
		t.Fatalf("central holds %d movements for %d dispenses", n, len(want))
	}
	for id := range want {
		if _, err := s.GetLastMsgForSubject(context.Background(), central.Subject(storeID, movement.KeyString(storeID, id))); err != nil {
			t.Fatalf("central lacks %s: %v", id, err)
		}
	}
	r.kill()
	r.summary()
}

// dropped is the number of files in the drop folder the agent will take.
func dropped(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") && !strings.HasSuffix(e.Name(), ".tmp") && !strings.HasSuffix(e.Name(), ".part") {
			n++
		}
	}
	return n
}

// filesDone is the number of ASAP files the running agent reports moved
// to done/ since it started (0 when it does not answer): it counts a file
// once the move is durable.
func (r *rig) filesDone() int {
	resp, err := http.Get("http://" + r.addr + "/v1/status")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var st struct {
		Intakes []struct {
			Name      string `json:"name"`
			FilesDone int    `json:"files_done"`
		} `json:"intakes"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return 0
	}
	for _, in := range st.Intakes {
		if in.Name == "asap" {
			return in.FilesDone
		}
	}
	return 0
}
