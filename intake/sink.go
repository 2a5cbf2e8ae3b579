package intake

import (
	"sync/atomic"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
)

// Sink hands prepared movements to the queue's group commit: the same
// path, and the same commits, as POST /v1/movements.
type Sink struct {
	Queue   *queue.Queue
	StoreID string
	Clock   func() time.Time
}

// Now is the sink's clock.
func (s *Sink) Now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock()
}

// Enqueue stores items all or nothing; it returns after the fsync.
func (s *Sink) Enqueue(items []movement.Prepared) ([]queue.Result, error) {
	return s.Queue.Enqueue(items)
}

// EnqueueEach stores each item on its own, in one commit; it returns
// after the fsync.
func (s *Sink) EnqueueEach(items []movement.Prepared) ([]queue.Result, error) {
	return s.Queue.EnqueueEach(items)
}

// Names of the intakes, as status and metrics show them.
const (
	NameHTTP = "http"
	NameHL7  = "hl7"
	NameASAP = "asap"
)

// Counter counts one intake's movements. Safe for concurrent use.
type Counter struct {
	accepted, duplicates, rejected  atomic.Uint64
	last                            atomic.Int64 // unix nanoseconds
	files, filesDone, filesRejected atomic.Uint64
	// setAsideTotal counts files the ASAP drop folder set aside (each
	// time one is set aside for a new reason); setAside is how many its
	// folder holds set aside now.
	setAsideTotal, setAside atomic.Uint64
}

// Add records one submission's outcome at now.
func (c *Counter) Add(accepted, duplicates, rejected int, now time.Time) {
	if c == nil {
		return
	}
	c.accepted.Add(uint64(accepted))
	c.duplicates.Add(uint64(duplicates))
	c.rejected.Add(uint64(rejected))
	c.last.Store(now.UnixNano())
}

// File records a file finished, moved to done/ or to rejected/.
func (c *Counter) File(rejected bool) {
	if c == nil {
		return
	}
	c.files.Add(1)
	if rejected {
		c.filesRejected.Add(1)
	} else {
		c.filesDone.Add(1)
	}
}

// FileSetAside records a file the drop folder left in place, unable to
// take it (not a regular file, unreadable, written to while read, or
// impossible to move out): counted once per file and reason.
func (c *Counter) FileSetAside() {
	if c == nil {
		return
	}
	c.setAsideTotal.Add(1)
}

// SetAside records how many files the drop folder holds set aside now.
func (c *Counter) SetAside(n int) {
	if c == nil {
		return
	}
	c.setAside.Store(uint64(max(n, 0)))
}

// Counters are the counters of every intake.
type Counters struct {
	HTTP, HL7, ASAP Counter
}

// Snapshot is every intake's counts, for status and metrics.
func (c *Counters) Snapshot() []status.Intake {
	if c == nil {
		return nil
	}
	one := func(name string, k *Counter) status.Intake {
		in := status.Intake{Name: name, Accepted: k.accepted.Load(), Duplicates: k.duplicates.Load(), Rejected: k.rejected.Load()}
		if n := k.last.Load(); n != 0 {
			t := time.Unix(0, n).UTC()
			in.LastReceivedAt = &t
		}
		if name == NameASAP {
			in.FilesDone, in.FilesRejected = k.filesDone.Load(), k.filesRejected.Load()
			in.FilesSetAside, in.FilesSetAsideTotal = k.setAside.Load(), k.setAsideTotal.Load()
		}
		return in
	}
	return []status.Intake{one(NameHTTP, &c.HTTP), one(NameHL7, &c.HL7), one(NameASAP, &c.ASAP)}
}
