package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
)

// freePages leaves n bytes of free pages in the data file of dir, as a
// drained backlog does.
func freePages(t *testing.T, dir string, n int) {
	t.Helper()
	db, err := bolt.Open(settings.DataFile(dir), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	val := bytes.Repeat([]byte{'x'}, 1<<20)
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("scratch"))
		if err != nil {
			return err
		}
		for i := 0; i < n>>20; i++ {
			if err := b.Put([]byte(fmt.Sprint(i)), val); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("scratch")) })
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestCompactCLI(t *testing.T) {
	dir, keys := quarantinedDataDir(t, mv{ID: "A"}, mv{ID: "B", Reason: "exhausted:timeout"})
	freePages(t, dir, 8<<20)
	path := settings.DataFile(dir)
	before, _ := os.Stat(path)

	out := mustCLI(t, "compact", "--data-dir", dir)
	if !strings.Contains(out, "not worth compacting") || !strings.Contains(out, "--force") {
		t.Errorf("compact of a small file:\n%s", out)
	}
	if fi, _ := os.Stat(path); !os.SameFile(fi, before) || fi.Size() != before.Size() {
		t.Errorf("compact without --force changed the file")
	}
	out = mustCLI(t, "compact", "--data-dir", dir, "--json")
	var rep compactReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Compacted || rep.BeforeBytes != before.Size() || rep.FreeBytes < 8<<20 {
		t.Errorf("compact --json of a small file: %+v, %v\n%s", rep, err, out)
	}

	out = mustCLI(t, "compact", "--data-dir", dir, "--force", "--json")
	rep = compactReport{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	after, _ := os.Stat(path)
	if !rep.Compacted || !rep.Journaled || rep.BeforeBytes != before.Size() || rep.AfterBytes != after.Size() || rep.AfterBytes >= rep.BeforeBytes/4 || rep.Path != path {
		t.Errorf("compact --force --json = %+v; file %d bytes before, %d after", rep, before.Size(), after.Size())
	}

	out = mustCLI(t, "compact", "--data-dir", dir, "--force")
	if !strings.HasPrefix(out, "compacted "+path+": ") || !strings.Contains(out, "% of before") {
		t.Errorf("compact --force:\n%s", out)
	}

	out = mustCLI(t, "dlq", "list", "--data-dir", dir)
	for _, k := range keys {
		if !strings.Contains(out, k) {
			t.Errorf("quarantined %s missing after compaction:\n%s", k, out)
		}
	}
	out = mustCLI(t, "audit", "--data-dir", dir, "--json")
	var audit dlq.AuditResult
	if err := json.Unmarshal([]byte(out), &audit); err != nil {
		t.Fatal(err)
	}
	var compacts int
	for _, e := range audit.Events {
		if e.Action == queue.ActionCompact {
			compacts++
			if e.Actor != control.LocalActor() || e.Reason != "agent compact" || e.Detail["before_bytes"] == "" {
				t.Errorf("journal entry %+v", e)
			}
		}
	}
	if compacts != 2 {
		t.Errorf("%d compact entries in the journal, want 2", compacts)
	}
}

func TestCompactCLIRefusesWhileTheAgentRuns(t *testing.T) {
	dir, _ := quarantinedDataDir(t, mv{ID: "A"})

	// Another process holds the file.
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: cliStore})
	if err != nil {
		t.Fatal(err)
	}
	_, errs, code := runCLI(t, "compact", "--data-dir", dir, "--force")
	q.Close()
	if code != 1 || !strings.Contains(errs, "the agent is running") || !strings.Contains(errs, "stop the service first") {
		t.Errorf("compact of a locked file: exit %d, stderr %q", code, errs)
	}

	// The agent runs and answers on its socket.
	runDaemon(t, localOptions(t, dir), nil)
	_, errs, code = runCLI(t, "compact", "--data-dir", dir, "--force")
	if code != 1 || !strings.Contains(errs, "stop the service first") {
		t.Errorf("compact while the agent runs: exit %d, stderr %q", code, errs)
	}
	if _, err := os.Stat(settings.DataFile(dir) + queue.CompactSuffix); !os.IsNotExist(err) {
		t.Errorf("a refused compaction left %s%s: %v", settings.DataFile(dir), queue.CompactSuffix, err)
	}
}
