//go:build !windows

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rxedge/agent/internal/disk"
	"github.com/rxedge/agent/testkit/agentbin"
)

// asapDispenses is an ASAP 4.2B file of n valid dispenses.
func asapDispenses(ctl, rx string, n int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "TH*4.2B*%s*01**20260302*101500*P**~~\n", ctl)
	for i := range n {
		fmt.Fprintf(&b, "DSP*00*%s%06d*20260301*0*20260301*00*01*00406055262*1**01~\n", rx, i)
	}
	fmt.Fprintf(&b, "TT*%s*%d~\n", ctl, n+2)
	return b.Bytes()
}

// TestASAPFolderNeverStalls runs the built agent with a drop folder that
// holds what used to stall it: a FIFO and a symbolic link to one, a valid
// file whose name is at the file system's limit dropped twice (the second
// copy's name in done/ was looked for for ever, on one core, and the
// agent could not stop), and a malformed file under such a name (its
// report's name was too long to write, which ended every scan there, so
// the files after it were never taken). Every valid file is taken, the
// entries it cannot take are counted in status, and the agent stops
// cleanly on SIGTERM while it takes a large file.
func TestASAPFolderNeverStalls(t *testing.T) {
	dir := t.TempDir()
	asapDir := filepath.Join(dir, "asap")
	a := asapAgent(t, dir, asapDir)
	limit := disk.NameMax(asapDir)
	if err := syscall.Mkfifo(filepath.Join(asapDir, "a-fifo.asap"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "fifo"), filepath.Join(asapDir, "a-link.asap")); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("b", limit-5) + ".asap"
	dropFile(t, asapDir, "z.asap", asapDispenses("Z1", "RXZ", 3))
	taken := func(folder string, want int) func() bool {
		return func() bool {
			ents, _ := os.ReadDir(filepath.Join(asapDir, folder))
			return len(ents) == want
		}
	}
	stalled := !waitBounded(time.Minute, a, taken("done", 1))
	if stalled {
		t.Errorf("z.asap was not taken within a minute\n%s", a.stderr)
	}
	for i := 0; i < 2 && !stalled; i++ {
		dropFile(t, asapDir, long, asapDispenses("B1", fmt.Sprintf("RXB%d-", i), 2))
		if !waitBounded(time.Minute, a, taken("done", i+2)) {
			t.Errorf("copy %d of the long name was not taken within a minute\n%s", i+1, a.stderr)
			stalled = true
			break
		}
	}
	if !stalled {
		// A malformed file under a long name, and a file after it.
		dropFile(t, asapDir, strings.Repeat("c", limit-5)+".asap", []byte("TH*4.1*C1*01**20260302*101500*P**~~TT*C1*2~"))
		dropFile(t, asapDir, "zz.asap", asapDispenses("Z2", "RXZZ", 3))
		if !waitBounded(time.Minute, a, taken("rejected", 2)) || !waitBounded(time.Minute, a, taken("done", 4)) {
			t.Errorf("the malformed long name, or the file after it, was not taken within a minute\n%s", a.stderr)
		}
		checkSetAside(t, a, filepath.Join(dir, "data"), asapDir)
	}

	// A large file in the folder when the stop comes.
	dropFile(t, asapDir, "large.asap", asapDispenses("L1", "RXL", 60000))
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.exited:
		a.exited <- err
		if err != nil {
			t.Errorf("the agent exited with %v after SIGTERM, want a clean stop\n%s", err, a.stderr)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the agent did not stop within a minute of SIGTERM\n%s", a.stderr)
	}
}

// checkSetAside: status and metrics count the FIFO and the link, left in
// the folder, and the log says why, once each.
func checkSetAside(t *testing.T, a *agent, data, asapDir string) {
	t.Helper()
	out, _ := exec.Command(agentbin.Build(t), "status", "--json", "--data-dir", data).Output()
	var st struct {
		Intakes []struct {
			Name               string
			FilesDone          int `json:"files_done"`
			FilesRejected      int `json:"files_rejected"`
			FilesSetAside      int `json:"files_set_aside"`
			FilesSetAsideTotal int `json:"files_set_aside_total"`
		}
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("agent status --json: %v\n%s", err, out)
	}
	in := st.Intakes[len(st.Intakes)-1]
	if in.Name != "asap" || in.FilesDone != 4 || in.FilesRejected != 1 || in.FilesSetAside != 2 || in.FilesSetAsideTotal != 2 {
		t.Errorf("status %+v, want asap: 4 done, 1 rejected, 2 set aside now and in all", in)
	}
	m := scrape(t, a.addr)
	for _, want := range []string{`rxedge_intake_files_total{result="set_aside"} 2`, `rxedge_intake_files_set_aside 2`} {
		if !bytes.Contains(m, []byte(want)) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "rxedge_intake_files"))
		}
	}
	for _, name := range []string{"a-fifo.asap", "a-link.asap"} {
		if _, err := os.Lstat(filepath.Join(asapDir, name)); err != nil {
			t.Errorf("%s left the folder: %v", name, err)
		}
		n := 0
		for _, line := range strings.Split(a.stderr.String(), "\n") {
			if strings.Contains(line, `"msg":"ASAP_FILE_SET_ASIDE"`) && strings.Contains(line, `"file":"`+name+`"`) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d log lines set %s aside, want 1\n%s", n, name, a.stderr)
		}
	}
}

// waitBounded polls cond every 50ms until it holds or limit passed, or
// the agent exited.
func waitBounded(limit time.Duration, a *agent, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		select {
		case err := <-a.exited:
			a.exited <- err
			return false
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}
