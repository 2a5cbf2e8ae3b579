package fleet

import (
	"cmp"
	"slices"
	stdsync "sync"
	"time"
)

// Problem is one alert of head office's fleet watch: it opens once when
// a problem starts (a store offline longer than a threshold, a
// quarantine appearing, a finding, sink lag) and closes once when it
// ends, however often it is seen in between. There is at most one open
// problem per (Kind, Store); Store is "" for a problem of head office
// itself (sink lag).
type Problem struct {
	Kind   string
	Store  string
	Opened time.Time
	// Closed is nil while the problem is open.
	Closed *time.Time
	// Detail says what is wrong, in words, without a payload; an open
	// problem's detail is the latest seen.
	Detail string
}

// ProblemBook keeps problems in memory by the rule of Problem: Open
// opens a problem only if none of its kind is open for the store, Close
// closes it only if one is. It keeps every open problem and the newest
// MaxClosed closed ones.
//
// Ownership: everything is behind one mutex.
type ProblemBook struct {
	mu     stdsync.Mutex
	open   map[problemKey]*Problem
	closed []Problem // oldest first, at most MaxClosed
}

type problemKey struct{ kind, store string }

// MaxClosed bounds the closed problems a ProblemBook keeps.
const MaxClosed = 10_000

// NewProblemBook returns an empty book.
func NewProblemBook() *ProblemBook {
	return &ProblemBook{open: map[problemKey]*Problem{}}
}

// Open opens a problem of kind at store at the time at, unless one is
// open: it reports whether it opened one (the moment to alert). An open
// problem's detail is updated.
func (b *ProblemBook) Open(kind, store, detail string, at time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := problemKey{kind, store}
	if p := b.open[k]; p != nil {
		p.Detail = detail
		return false
	}
	b.open[k] = &Problem{Kind: kind, Store: store, Opened: at, Detail: detail}
	return true
}

// Close closes the open problem of kind at store at the time at: it
// reports whether one was open (the moment to say it cleared).
func (b *ProblemBook) Close(kind, store string, at time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := problemKey{kind, store}
	p := b.open[k]
	if p == nil {
		return false
	}
	delete(b.open, k)
	p.Closed = &at
	if len(b.closed) == MaxClosed {
		b.closed = slices.Delete(b.closed, 0, 1)
	}
	b.closed = append(b.closed, *p)
	return true
}

// List returns the problems of store ("" for all): the open ones first,
// oldest opened first, then, unless openOnly, the closed ones newest
// first; at most limit (0: no limit).
func (b *ProblemBook) List(store string, openOnly bool, limit int) []Problem {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Problem
	for _, p := range b.open {
		if store == "" || p.Store == store {
			out = append(out, *p)
		}
	}
	slices.SortFunc(out, func(a, b Problem) int {
		return cmp.Or(a.Opened.Compare(b.Opened), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Store, b.Store))
	})
	for i := len(b.closed) - 1; i >= 0 && !openOnly; i-- {
		if store == "" || b.closed[i].Store == store {
			out = append(out, b.closed[i])
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}
