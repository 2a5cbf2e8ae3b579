package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/agentbin"
)

// TestDiskFull runs the built agent under a file-size limit (RLIMIT_FSIZE,
// set with prlimit): once the data file cannot grow, submissions get 507
// with a clear message, the agent stays up, earlier movements are intact,
// and when the limit is lifted new submissions succeed (DESIGN P3).
func TestDiskFull(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("RLIMIT_FSIZE is set with prlimit, on Linux")
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatal("prlimit (util-linux) is needed for the disk-full test; .ci/run installs it")
	}
	dir := t.TempDir()
	addr := agentbin.FreeAddr(t)
	const limit = 1 << 20
	a := startAgent(t, dir, addr, []string{prlimit, fmt.Sprintf("--fsize=%d:unlimited", limit), "--"})
	client := &http.Client{Timeout: 10 * time.Second}
	ctx := context.Background()

	acked := map[string]string{}
	note := `,"note":"` + strings.Repeat("n", 900) + `"`
	var full accepted
	i := 0
	for ; i < 5000; i++ {
		var body, ids []string
		for j := 0; j < 20; j++ {
			id := fmt.Sprintf("F%06d", i*20+j)
			ids = append(ids, id)
			body = append(body, movementJSON(id, note))
		}
		code, ans, err := post(ctx, client, addr, body)
		if err != nil {
			t.Fatalf("request %d: %v\n%s", i, err, a.stderr)
		}
		if code == http.StatusInsufficientStorage {
			full = ans
			break
		}
		if code != http.StatusAccepted {
			t.Fatalf("request %d: %d %+v", i, code, ans)
		}
		for _, r := range ans.Results {
			acked[r.MovementID] = r.Key
		}
	}
	if full.Error == "" {
		t.Fatalf("no 507 after %d requests under a %d byte file limit", i, limit)
	}
	if !strings.Contains(full.Error, "disk is full") || !strings.Contains(full.Error, "nothing was stored") {
		t.Fatalf("507 message is not clear: %q", full.Error)
	}
	t.Logf("507 after %d movements: %s", len(acked), full.Error)

	// The agent stays up. Small submissions may still fit the file's free
	// pages; full ones keep being refused with 507, never lost.
	refused := 0
	for k := 0; k < 10; k++ {
		var body []string
		for j := 0; j < 20; j++ {
			body = append(body, movementJSON(fmt.Sprintf("G%02d-%02d", k, j), note))
		}
		code, ans, err := post(ctx, client, addr, body)
		switch {
		case err != nil:
			t.Fatalf("while full: %v\n%s", err, a.stderr)
		case code == http.StatusInsufficientStorage:
			refused++
		case code == http.StatusAccepted:
			for _, r := range ans.Results {
				acked[r.MovementID] = r.Key
			}
		default:
			t.Fatalf("while full: %d %+v", code, ans)
		}
	}
	if refused == 0 {
		t.Fatal("the disk stopped being full by itself")
	}
	if resp, err := client.Get("http://" + addr + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz while full: %v", err)
	}

	// Room returns: lift the limit of the running agent.
	pid := strconv.Itoa(a.cmd.Process.Pid)
	if out, err := exec.Command(prlimit, "--pid", pid, "--fsize=unlimited").CombinedOutput(); err != nil {
		t.Fatalf("lifting the limit: %v %s", err, out)
	}
	for k := 0; k < 50; k++ {
		id := fmt.Sprintf("H%04d", k)
		code, ans, err := post(ctx, client, addr, []string{movementJSON(id, note)})
		if err != nil || code != http.StatusAccepted {
			t.Fatalf("after room returned: %d %+v %v\n%s", code, ans, err, a.stderr)
		}
		acked[id] = ans.Results[0].Key
	}

	// Stop cleanly and check every acknowledged movement.
	a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop")
	}
	q, err := queue.Open(queue.Options{Path: dataFile(dir), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Verify(); err != nil {
		t.Fatal(err)
	}
	for id, key := range acked {
		k, _ := movement.ParseKey(key)
		if e, err := q.Get(k); err != nil || e.Record.MovementID != id {
			t.Fatalf("movement %s lost or changed after the disk was full: %+v %v", id, e, err)
		}
	}
	if s, _ := q.Stats(); s.Count(queue.Pending) != uint64(len(acked)) {
		t.Fatalf("%d pending, %d acknowledged: a refused submission was stored", s.Count(queue.Pending), len(acked))
	}
}
