package queue

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The crash test runs Compact in a child process (this test binary, run
// again with crashChildEnv naming the file) and kills it with SIGKILL:
// at each phase of the compaction, and at random moments. The child prints
// each phase as it reaches it, so the parent knows how far it got.
const (
	crashChildEnv  = "RXEDGE_COMPACT_CRASH_FILE"
	crashKillAtEnv = "RXEDGE_COMPACT_CRASH_KILL_AT"
	crashSeedEnv   = "RXEDGE_COMPACT_CRASH_SEED"
	crashRandomEnv = "RXEDGE_COMPACT_CRASH_RANDOM_KILLS"
)

// TestCompactCrashChild is the child: it does nothing unless run by
// TestCompactCrash.
func TestCompactCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		t.Skip("run by TestCompactCrash")
	}
	killAt := os.Getenv(crashKillAtEnv)
	hook := func(phase string) {
		fmt.Printf("PHASE %s\n", phase)
		if phase == killAt {
			p, _ := os.FindProcess(os.Getpid())
			p.Kill() // SIGKILL on Unix
			select {}
		}
	}
	if _, err := Compact(path, CompactOptions{hook: hook, TxSize: 4 << 20}); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	fmt.Println("PHASE done")
}

// crashPhases are the phases in the order the child reaches them.
var crashPhases = []string{"start", phaseLocked, phaseCopying, phaseCopied, phaseSynced, phaseVerified, phaseRenamed, phaseDirSynced, phaseReleased, phaseJournaled, "done"}

// crashRun is one run of the child.
type crashRun struct {
	last     string        // the last phase the child printed ("start" for none)
	killed   bool          // the child did not finish
	duration time.Duration // from the lock to the end of the compaction
}

// runChild compacts path in a child process; it kills the child at
// killAt (a phase) or after killAfter (counted from the moment the child
// locked the file), or lets it finish when both are zero.
func runChild(t *testing.T, path, killAt string, killAfter time.Duration) crashRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCompactCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path, crashKillAtEnv+"="+killAt)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	run := crashRun{last: "start"}
	phases := make(chan string)
	go func() {
		defer close(phases)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "PHASE "); ok {
				phases <- p
			}
		}
	}()
	var timer <-chan time.Time
	var locked time.Time
	sentKill := false
	for p := range phases {
		run.last = p
		if p == "done" {
			run.duration = time.Since(locked)
		}
		if p == phaseLocked {
			locked = time.Now()
			if killAfter > 0 {
				timer = time.After(killAfter)
				break
			}
		}
	}
	if timer != nil {
		// Keep reading phases until the timer fires, then kill.
	wait:
		for {
			select {
			case p, ok := <-phases:
				if !ok {
					break wait
				}
				run.last = p
			case <-timer:
				cmd.Process.Kill()
				sentKill = true
				break wait
			}
		}
		for p := range phases { // phases printed before the kill landed
			run.last = p
		}
	}
	werr := cmd.Wait()
	run.killed = run.last != "done"
	if !run.killed && werr != nil && !sentKill { // a kill may land after "done"
		t.Fatalf("child failed: %v\n%s", werr, stderr.String())
	}
	if run.killed && werr == nil {
		t.Fatalf("child stopped at %s but exited cleanly\n%s", run.last, stderr.String())
	}
	if killAt != "" && run.last != killAt {
		t.Fatalf("child killed at phase %q, want %q\n%s", run.last, killAt, stderr.String())
	}
	return run
}

// TestCompactCrash kills a compaction with SIGKILL at every phase and at
// random moments, and checks after each kill that the data file opens,
// passes Verify, holds exactly what it held before (old or new file, never
// neither), and that no <path>.compact survives the next compaction or
// start-up check.
func TestCompactCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a large file; skipped in -short")
	}
	dir := t.TempDir()
	pristine := filepath.Join(dir, "pristine.db")
	spec := fixture{filler: 80000, pending: 50000, synced: 50000, quarantined: 500, fillerNoteLen: 1000}
	if raceEnabled {
		spec = fixture{filler: 20000, pending: 12000, synced: 12000, quarantined: 200, fillerNoteLen: 1000}
	}
	began := time.Now()
	size := spec.build(t, pristine)
	want := takeSnapshot(t, pristine)
	sp, err := space(pristine, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fixture: %d pending, %d synced, %d quarantined; %d bytes, %.0f%% free; built in %s",
		spec.pending, spec.synced, spec.quarantined, size, 100*sp.FreeFraction(), time.Since(began).Round(time.Millisecond))

	path := filepath.Join(dir, "agent.db")
	check := func(name string, run crashRun, old os.FileInfo, i int) (replaced bool) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("%s: the data file is gone after a kill at %s: %v", name, run.last, err)
		}
		replaced = !os.SameFile(old, fi)
		at := slices.Index(crashPhases, run.last)
		switch {
		case at < slices.Index(crashPhases, phaseVerified) && replaced:
			t.Fatalf("%s: killed at %s, before the rename, but the file was replaced", name, run.last)
		case at >= slices.Index(crashPhases, phaseRenamed) && !replaced:
			t.Fatalf("%s: killed at %s, after the rename, but the old file is in place", name, run.last)
		}
		q, err := Open(Options{Path: path, StoreID: testStore})
		if err != nil {
			t.Fatalf("%s: open after a kill at %s: %v", name, run.last, err)
		}
		if err := q.Verify(); err != nil {
			t.Fatalf("%s: Verify after a kill at %s: %v", name, run.last, err)
		}
		q.Close()
		if err := takeSnapshot(t, path).sameAs(want); err != nil {
			t.Fatalf("%s: after a kill at %s: %v", name, run.last, err)
		}
		// The next compaction, or the next start-up check, removes what
		// the killed one left behind.
		if i%2 == 0 {
			if _, err := Compact(path, CompactOptions{}); err != nil {
				t.Fatalf("%s: compaction after a kill at %s: %v", name, run.last, err)
			}
			if err := takeSnapshot(t, path).sameAs(want); err != nil {
				t.Fatalf("%s: after compacting again: %v", name, err)
			}
		} else if _, _, err := CompactionNeeded(path); err != nil {
			t.Fatal(err)
		}
		noLeftover(t, path)
		return replaced
	}
	fresh := func() os.FileInfo {
		t.Helper()
		copyFileForTest(t, pristine, path)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}

	// A run to the end gives the duration the random kills spread over.
	fresh()
	full := runChild(t, path, "", 0)
	t.Logf("an uninterrupted compaction took %s", full.duration.Round(time.Millisecond))

	i := 0
	for _, phase := range crashPhases[1 : len(crashPhases)-1] {
		old := fresh()
		run := runChild(t, path, phase, 0)
		replaced := check("kill at "+phase, run, old, i)
		t.Logf("kill at %-9s → %s file in place", phase, map[bool]string{false: "old", true: "new"}[replaced])
		i++
	}

	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		fmt.Sscan(s, &seed)
	}
	n := 12
	if s := os.Getenv(crashRandomEnv); s != "" {
		fmt.Sscan(s, &n)
	}
	rnd := rand.New(rand.NewPCG(seed, 0))
	reached := map[string]int{}
	outcomes := map[bool]int{}
	for k := 0; k < n; k++ {
		old := fresh()
		after := time.Duration(rnd.Int64N(int64(full.duration)*11/10)) + time.Millisecond
		run := runChild(t, path, "", after)
		outcomes[check(fmt.Sprintf("random kill %d after %s (seed %d)", k, after, seed), run, old, i)]++
		reached[run.last]++
		i++
	}
	var summary []string
	for _, p := range crashPhases {
		if reached[p] > 0 {
			summary = append(summary, fmt.Sprintf("%s:%d", p, reached[p]))
		}
	}
	t.Logf("%d random kills (seed %d; %s=N to repeat): last phase reached %s; old file kept %d, new file in place %d",
		n, seed, crashSeedEnv, strings.Join(summary, " "), outcomes[false], outcomes[true])
}
