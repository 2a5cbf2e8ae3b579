package reconcile

import "sort"

// Range is the sequences From..To, both included.
type Range struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// Len is the number of sequences in r.
func (r Range) Len() uint64 { return r.To - r.From + 1 }

// Set is a set of sequences held as sorted, disjoint, non-adjacent
// ranges: its memory grows with the number of gaps, not of sequences, so
// a store's two years of movements, delivered almost in order, take a few
// ranges. Adding in ascending order, or at the end, costs O(1); elsewhere
// a binary search and, when a new range is needed, a copy of the ranges
// after it. The zero value is the empty set. A Set is not safe for
// concurrent use.
type Set struct {
	r []Range
	n uint64
}

// Add adds x and reports whether it was new.
func (s *Set) Add(x uint64) bool {
	k := len(s.r)
	if k > 0 {
		last := &s.r[k-1]
		switch {
		case x >= last.From && x <= last.To:
			return false
		case x == last.To+1 && last.To != ^uint64(0):
			last.To = x
			s.n++
			return true
		}
	}
	if k == 0 || x > s.r[k-1].To {
		s.r = append(s.r, Range{x, x})
		s.n++
		return true
	}
	// The first range that ends at or after x.
	i := sort.Search(k, func(i int) bool { return s.r[i].To >= x })
	if s.r[i].From <= x {
		return false
	}
	s.n++
	joinsPrev := i > 0 && s.r[i-1].To+1 == x
	joinsNext := s.r[i].From-1 == x
	switch {
	case joinsPrev && joinsNext:
		s.r[i-1].To = s.r[i].To
		s.r = append(s.r[:i], s.r[i+1:]...)
	case joinsPrev:
		s.r[i-1].To = x
	case joinsNext:
		s.r[i].From = x
	default:
		s.r = append(s.r, Range{})
		copy(s.r[i+1:], s.r[i:])
		s.r[i] = Range{x, x}
	}
	return true
}

// AddRange adds every sequence of r.
func (s *Set) AddRange(r Range) {
	for x := r.From; ; x++ {
		s.Add(x)
		if x == r.To {
			return
		}
	}
}

// Contains reports whether x is in s.
func (s *Set) Contains(x uint64) bool {
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].To >= x })
	return i < len(s.r) && s.r[i].From <= x
}

// ContainsRange reports whether every sequence of r is in s.
func (s *Set) ContainsRange(r Range) bool {
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].To >= r.From })
	return i < len(s.r) && s.r[i].From <= r.From && s.r[i].To >= r.To
}

// Len is the number of sequences in s.
func (s *Set) Len() uint64 { return s.n }

// Ranges are s's ranges in ascending order; the caller must not change
// them.
func (s *Set) Ranges() []Range { return s.r }

// Min and Max are the lowest and the highest sequence in s; 0 when s is
// empty.
func (s *Set) Min() uint64 {
	if len(s.r) == 0 {
		return 0
	}
	return s.r[0].From
}

// Max is the highest sequence in s; 0 when s is empty.
func (s *Set) Max() uint64 {
	if len(s.r) == 0 {
		return 0
	}
	return s.r[len(s.r)-1].To
}

// Gaps returns the sequences of lo..hi that are not in s, as ranges in
// ascending order; nothing when lo > hi or lo is 0.
func (s *Set) Gaps(lo, hi uint64) []Range {
	if lo == 0 || lo > hi {
		return nil
	}
	var out []Range
	next := lo
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].To >= lo })
	for ; i < len(s.r) && s.r[i].From <= hi; i++ {
		if s.r[i].From > next {
			out = append(out, Range{next, s.r[i].From - 1})
		}
		if s.r[i].To >= hi {
			return out
		}
		next = s.r[i].To + 1
	}
	return append(out, Range{next, hi})
}

// Count is the number of sequences in rs.
func Count(rs []Range) uint64 {
	var n uint64
	for _, r := range rs {
		n += r.Len()
	}
	return n
}
