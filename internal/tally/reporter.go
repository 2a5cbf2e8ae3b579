package tally

import (
	stdsync "sync"
	"time"
)

// Reporter is a Tally safe for concurrent use that hands the reports due
// to emit: at once when an event's cause is due, else from a timer once
// the window has passed. The tally and the timer are owned by mu; emit is
// called without it held, so it may take its time (write a journal).
type Reporter[K comparable, D any] struct {
	window time.Duration
	clock  func() time.Time
	emit   func([]Report[K, D])

	mu     stdsync.Mutex
	t      *Tally[K, D]
	timer  *time.Timer // set while a flush is scheduled
	closed bool
}

// NewReporter returns a reporter of t's decisions, with t's window, the
// time from clock (time.Now when nil), and reports handed to emit.
func NewReporter[K comparable, D any](t *Tally[K, D], clock func() time.Time, emit func([]Report[K, D])) *Reporter[K, D] {
	if clock == nil {
		clock = time.Now
	}
	return &Reporter[K, D]{window: t.window, clock: clock, emit: emit, t: t}
}

// Note counts one event and emits the reports due now; the others are
// emitted by a timer once due.
func (r *Reporter[K, D]) Note(c K, d D) {
	r.mu.Lock()
	reps := r.t.Note(c, d, r.clock())
	r.schedule()
	r.mu.Unlock()
	r.send(reps)
}

// Flush emits the reports due now: the timer's work.
func (r *Reporter[K, D]) Flush() {
	r.mu.Lock()
	r.timer = nil
	reps := r.t.Due(r.clock())
	r.schedule()
	r.mu.Unlock()
	r.send(reps)
}

// Close stops the timer: the events counted since their cause's last
// report are not reported.
func (r *Reporter[K, D]) Close() {
	r.mu.Lock()
	r.stop()
	r.mu.Unlock()
}

// Drain stops the timer and emits every count waiting, whatever its
// window and the budget (see Tally.Rest).
func (r *Reporter[K, D]) Drain() {
	r.mu.Lock()
	r.stop()
	reps := r.t.Rest(r.clock())
	r.mu.Unlock()
	r.send(reps)
}

// schedule arms the timer when events wait and none is armed; r.mu is
// held.
func (r *Reporter[K, D]) schedule() {
	if r.closed || r.timer != nil || !r.t.Pending() {
		return
	}
	r.timer = time.AfterFunc(r.window, r.Flush)
}

// stop stops the timer for good; r.mu is held.
func (r *Reporter[K, D]) stop() {
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

func (r *Reporter[K, D]) send(reps []Report[K, D]) {
	if len(reps) > 0 {
		r.emit(reps)
	}
}
