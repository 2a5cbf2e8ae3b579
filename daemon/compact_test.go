package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/testkit/syncbuf"
)

// inflate leaves n bytes of free pages in the bbolt file at path, the way
// a drained backlog does: it writes a scratch bucket and deletes it.
func inflate(t *testing.T, path string, n int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
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
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("scratch")) }); err != nil {
		t.Fatal(err)
	}
}

func TestRunCompactsAtStartWhenMostlyFree(t *testing.T) {
	dir := t.TempDir()
	if n := len(control.Endpoint(dir)); n >= 104 {
		t.Skipf("the control socket's path in the temporary directory is %d bytes, over the limit of unix socket addresses", n)
	}
	path := settings.DataFile(dir)
	q, err := queue.Open(queue.Options{Path: path, StoreID: "S0042"})
	if err != nil {
		t.Fatal(err)
	}
	var keys [][16]byte
	for i := range 50 {
		js := fmt.Sprintf(`{"movement_id":"POS-%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, i)
		p, es := movement.Prepare([]byte(js), "S0042", time.Now())
		if es != nil {
			t.Fatal(es)
		}
		if _, err := q.Enqueue([]movement.Prepared{p}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, p.Key)
	}
	q.Close()
	inflate(t, path, 100<<20)
	if err := os.WriteFile(path+queue.CompactSuffix, []byte("left by a crash"), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	if need, sp, err := queue.CompactionNeeded(path); !need || err != nil {
		t.Fatalf("CompactionNeeded = %v, %+v, %v; want true", need, sp, err)
	}

	c := settings.Config{StoreID: "S0042", DataDir: dir}
	c.Ingest.Listen = "off"
	opts, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = Run(ctx, opts, slog.New(slog.NewJSONHandler(&logs, nil)), Hooks{Ready: func(string) { cancel() }})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, logs.String())
	}

	var compacted map[string]any
	for _, line := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "COMPACTED" {
			compacted = m
		}
	}
	after, _ := os.Stat(path)
	if compacted == nil || compacted["before"] != float64(before.Size()) || compacted["after"] != float64(after.Size()) {
		t.Fatalf("COMPACTED log = %v, want before %d after %d; logs:\n%s", compacted, before.Size(), after.Size(), logs.String())
	}
	if after.Size() > before.Size()/10 {
		t.Errorf("file %d bytes after start-up, %d before: not compacted", after.Size(), before.Size())
	}
	if _, err := os.Stat(path + queue.CompactSuffix); !os.IsNotExist(err) {
		t.Errorf("the leftover of an earlier compaction survived the start-up: %v", err)
	}

	q, err = queue.Open(queue.Options{Path: path, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Verify(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if e, err := q.Get(k); err != nil || e.State != queue.Pending {
			t.Fatalf("key %x after start-up: %+v, %v", k, e, err)
		}
	}
	var actions []string
	q.Events(time.Time{}, func(e queue.Event) bool {
		actions = append(actions, e.Action+":"+e.Actor)
		return true
	})
	if got, want := strings.Join(actions, " "), "compact:agent start:agent"; got != want {
		t.Errorf("journal %q, want %q", got, want)
	}

	// A second start finds nothing to compact.
	logs = syncbuf.Buffer{}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	q.Close()
	if err := Run(ctx, opts, slog.New(slog.NewJSONHandler(&logs, nil)), Hooks{Ready: func(string) { cancel() }}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "COMPACT") {
		t.Errorf("second start compacted again:\n%s", logs.String())
	}
}
