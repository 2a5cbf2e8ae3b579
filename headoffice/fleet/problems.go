package fleet

import (
	"cmp"
	"slices"
	stdsync "sync"
	"time"
	"unicode/utf8"
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
// closes it only if one is (and, with a ClearAfter, only once it has
// been absent that long). It keeps every open problem and the newest
// MaxClosed closed ones, at most MaxClosedPerStore of one store, so that
// a store whose summary flaps (its own credentials write it) cannot push
// the other stores' history out.
//
// Ownership: everything is behind one mutex.
type ProblemBook struct {
	mu         stdsync.Mutex
	open       map[problemKey]*Problem
	absent     map[problemKey]time.Time // open problems not seen since
	closed     []Problem                // oldest first, at most MaxClosed
	perStore   map[string]int           // closed problems kept, by store
	clearAfter time.Duration
}

type problemKey struct{ kind, store string }

// Bounds of a ProblemBook.
const (
	// MaxClosed bounds the closed problems a book keeps.
	MaxClosed = 10_000
	// MaxClosedPerStore bounds those of one store.
	MaxClosedPerStore = 100
	// MaxDetail bounds a problem's detail, in bytes: a store's summary
	// supplies it, and it goes into the log and onto pages.
	MaxDetail = 256
)

// NewProblemBook returns an empty book that closes a problem as soon as
// it is not seen (see SetClearAfter).
func NewProblemBook() *ProblemBook {
	return &ProblemBook{open: map[problemKey]*Problem{}, absent: map[problemKey]time.Time{}, perStore: map[string]int{}}
}

// SetClearAfter makes Close close a problem only once it has been absent
// for d (every Close since the first that found it absent, with no Open
// between): a problem that comes and goes faster stays open, instead of
// opening and closing (and alerting) each time.
func (b *ProblemBook) SetClearAfter(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.clearAfter = d
}

// Open opens a problem of kind at store at the time at, unless one is
// open: it reports whether it opened one (the moment to alert). An open
// problem's detail is updated. The detail is clipped to MaxDetail.
func (b *ProblemBook) Open(kind, store, detail string, at time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := problemKey{kind, store}
	detail = ClipDetail(detail)
	delete(b.absent, k)
	if p := b.open[k]; p != nil {
		p.Detail = detail
		return false
	}
	b.open[k] = &Problem{Kind: kind, Store: store, Opened: at, Detail: detail}
	return true
}

// Close closes the open problem of kind at store at the time at: it
// reports whether it closed one (the moment to say it cleared).
func (b *ProblemBook) Close(kind, store string, at time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := problemKey{kind, store}
	p := b.open[k]
	if p == nil {
		return false
	}
	if b.clearAfter > 0 {
		since, ok := b.absent[k]
		if !ok {
			b.absent[k] = at
			return false
		}
		if at.Sub(since) < b.clearAfter {
			return false
		}
	}
	delete(b.open, k)
	delete(b.absent, k)
	p.Closed = &at
	b.keepClosed(*p)
	return true
}

// keepClosed adds a closed problem, dropping the oldest of its store when
// the store has MaxClosedPerStore, else the oldest of all when the book
// has MaxClosed.
func (b *ProblemBook) keepClosed(p Problem) {
	drop := -1
	if b.perStore[p.Store] >= MaxClosedPerStore {
		drop = slices.IndexFunc(b.closed, func(c Problem) bool { return c.Store == p.Store })
	} else if len(b.closed) >= MaxClosed {
		drop = 0
	}
	if drop >= 0 {
		b.perStore[b.closed[drop].Store]--
		b.closed = slices.Delete(b.closed, drop, drop+1)
	}
	b.closed = append(b.closed, p)
	b.perStore[p.Store]++
}

// ClipDetail clips a problem's detail to MaxDetail bytes, on a rune
// boundary, marking the cut.
func ClipDetail(s string) string {
	if len(s) <= MaxDetail {
		return s
	}
	cut := MaxDetail - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
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
