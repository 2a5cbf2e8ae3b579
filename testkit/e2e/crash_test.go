package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/agentbin"
)

// TestCrashKeepsEveryAcknowledgedMovement runs the built agent with 32
// concurrent clients posting movements and kills it with SIGKILL at random
// moments, at least ten times, restarting it each time. Every movement
// that got a 2xx answer must be in the data file exactly once, with its
// key (DESIGN P1).
func TestCrashKeepsEveryAcknowledgedMovement(t *testing.T) {
	const (
		clients    = 32
		killPoints = 12
	)
	dir := t.TempDir()
	addr := agentbin.FreeAddr(t)

	var (
		mu    stdsync.Mutex
		acked = make(map[string]string) // movement id → key from the answer
		next  atomic.Int64
		posts atomic.Int64
	)
	for round := 0; round < killPoints; round++ {
		a := startAgent(t, dir, addr, nil)
		ctx, cancel := context.WithCancel(context.Background())
		var wg stdsync.WaitGroup
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
				for ctx.Err() == nil {
					n := 1 + rand.IntN(4)
					var body, ids []string
					for i := 0; i < n; i++ {
						id := fmt.Sprintf("R%02d-%06d", round, next.Add(1))
						ids = append(ids, id)
						body = append(body, movementJSON(id, ""))
					}
					code, ans, err := post(ctx, client, addr, body)
					posts.Add(1)
					if err != nil || code/100 != 2 {
						continue
					}
					mu.Lock()
					for i, r := range ans.Results {
						if r.MovementID != ids[i] {
							t.Errorf("answer %d names %s, want %s", i, r.MovementID, ids[i])
						}
						acked[r.MovementID] = r.Key
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(50+rand.IntN(400)) * time.Millisecond)
		a.kill() // SIGKILL
		cancel()
		wg.Wait()
	}

	q, err := queue.Open(queue.Options{Path: dataFile(dir), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Verify(); err != nil {
		t.Fatalf("after %d kills: %v", killPoints, err)
	}
	s, _ := q.Stats()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) == 0 {
		t.Fatal("no movement was acknowledged")
	}
	for id, key := range acked {
		if want := movement.KeyString("S0042", id); key != want {
			t.Fatalf("%s answered with key %s, want %s", id, key, want)
		}
		k, _ := movement.ParseKey(key)
		e, err := q.Get(k)
		if err != nil {
			t.Fatalf("acknowledged movement %s (key %s) is missing after the crashes: %v", id, key, err)
		}
		if e.State != queue.Pending || e.Record == nil || e.Record.MovementID != id {
			t.Fatalf("acknowledged movement %s: %+v", id, e)
		}
	}
	// Verify established that every key is held once; unacknowledged
	// submissions may or may not have been committed before a kill.
	if s.Count(queue.Pending) < uint64(len(acked)) {
		t.Fatalf("%d pending for %d acknowledged", s.Count(queue.Pending), len(acked))
	}
	t.Logf("%d kill points, %d requests, %d movements acknowledged, %d held", killPoints, posts.Load(), len(acked), s.Count(queue.Pending))
}
