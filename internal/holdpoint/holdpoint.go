// Package holdpoint lets a crash test stop hq at a named point of a job,
// so that it can kill the process there (kill -9) and not somewhere near.
//
// It is inert unless the environment variable RXEDGE_HQ_HOLD_AT names a
// point, which no packaged unit or documented setting does: Reach is
// then one comparison of a string read once at start. With
// RXEDGE_HQ_HOLD_AT=NAME (or NAME:N, the Nth time the point is reached),
// Reach at that point writes "HQ_HOLD point=NAME" on standard error and
// waits, at most Bound, before going on: the test kills the process on
// seeing the line.
package holdpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Env is the variable that names the point to hold at.
const Env = "RXEDGE_HQ_HOLD_AT"

// Bound is the longest a point holds: a test that forgot to kill the
// process finds it going on, not hung.
const Bound = 5 * time.Minute

// The points a crash test holds at.
const (
	SinkBatch      = "sink.batch"        // inside a batch's transaction, its rows written, not committed
	WitnessPublish = "witness.published" // a countersignature published, the witness's state not saved
	VerifyRead     = "verify.read"       // a pass has read archive records (its progress), not concluded
	VerifyRecord   = "verify.record"     // inside the transaction recording a pass, its findings written, not its state
	ReconcilePass  = "reconcile.pass"    // a reconciliation read, its result not reported
)

var (
	once  sync.Once
	point string
	nth   int
	mu    sync.Mutex
	seen  int
)

func load() {
	v := os.Getenv(Env)
	if v == "" {
		return
	}
	name, n, ok := strings.Cut(v, ":")
	nth = 1
	if ok {
		if k, err := strconv.Atoi(n); err == nil && k > 0 {
			nth = k
		}
	}
	point = name
}

// Reach is a point of a job: inert unless Env names it (see the package
// doc).
func Reach(name string) {
	once.Do(load)
	if point == "" || name != point {
		return
	}
	mu.Lock()
	seen++
	hold := seen == nth
	mu.Unlock()
	if !hold {
		return
	}
	fmt.Fprintf(os.Stderr, "HQ_HOLD point=%s\n", name)
	time.Sleep(Bound) // held for a test to kill the process; bounded
}
