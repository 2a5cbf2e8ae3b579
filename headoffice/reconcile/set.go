package reconcile

import (
	"slices"
	"sort"
)

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
// ranges. The ranges are kept in blocks of at most setBlock, so that
// adding in any order costs a binary search and a copy within one block:
// a store publishes its archive records with whatever Rx-Seq it likes,
// and one flat slice would be copied whole at every Add of a descending
// run. Adding in ascending order, or at the end, costs O(1). The zero
// value is the empty set. A Set is not safe for concurrent use.
type Set struct {
	b [][]Range // non-empty blocks, in ascending order
	n uint64
}

// setBlock is the most ranges a block holds before it is split in two.
const setBlock = 512

// find returns the block and the index in it of the first range that
// ends at or after x; bi is len(s.b) when there is none.
func (s *Set) find(x uint64) (bi, ri int) {
	bi = sort.Search(len(s.b), func(i int) bool { return s.b[i][len(s.b[i])-1].To >= x })
	if bi == len(s.b) {
		return bi, 0
	}
	blk := s.b[bi]
	return bi, sort.Search(len(blk), func(i int) bool { return blk[i].To >= x })
}

// Add adds x and reports whether it was new.
func (s *Set) Add(x uint64) bool {
	if k := len(s.b); k > 0 {
		last := &s.b[k-1][len(s.b[k-1])-1]
		switch {
		case x >= last.From && x <= last.To:
			return false
		case x == last.To+1 && last.To != ^uint64(0):
			last.To = x
			s.n++
			return true
		case x > last.To:
			s.insert(k-1, len(s.b[k-1]), Range{x, x})
			s.n++
			return true
		}
	} else {
		s.b = [][]Range{{{x, x}}}
		s.n++
		return true
	}
	bi, ri := s.find(x)
	cur := &s.b[bi][ri]
	if cur.From <= x {
		return false
	}
	s.n++
	var prev *Range
	switch {
	case ri > 0:
		prev = &s.b[bi][ri-1]
	case bi > 0:
		prev = &s.b[bi-1][len(s.b[bi-1])-1]
	}
	joinsPrev := prev != nil && prev.To+1 == x
	joinsNext := cur.From-1 == x
	switch {
	case joinsPrev && joinsNext:
		prev.To = cur.To
		s.remove(bi, ri)
	case joinsPrev:
		prev.To = x
	case joinsNext:
		cur.From = x
	default:
		s.insert(bi, ri, Range{x, x})
	}
	return true
}

// insert puts r at index ri of block bi, splitting the block when full.
func (s *Set) insert(bi, ri int, r Range) {
	s.b[bi] = slices.Insert(s.b[bi], ri, r)
	if blk := s.b[bi]; len(blk) > setBlock {
		h := len(blk) / 2
		lo, hi := slices.Clip(blk[:h]), slices.Clone(blk[h:])
		s.b[bi] = lo
		s.b = slices.Insert(s.b, bi+1, hi)
	}
}

// remove deletes the range at index ri of block bi, and the block when it
// is left empty.
func (s *Set) remove(bi, ri int) {
	s.b[bi] = slices.Delete(s.b[bi], ri, ri+1)
	if len(s.b[bi]) == 0 {
		s.b = slices.Delete(s.b, bi, bi+1)
	}
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
	bi, ri := s.find(x)
	return bi < len(s.b) && s.b[bi][ri].From <= x
}

// ContainsRange reports whether every sequence of r is in s.
func (s *Set) ContainsRange(r Range) bool {
	bi, ri := s.find(r.From)
	return bi < len(s.b) && s.b[bi][ri].From <= r.From && s.b[bi][ri].To >= r.To
}

// Len is the number of sequences in s.
func (s *Set) Len() uint64 { return s.n }

// Ranges are s's ranges in ascending order, in a new slice.
func (s *Set) Ranges() []Range {
	var out []Range
	for _, blk := range s.b {
		out = append(out, blk...)
	}
	return out
}

// Min is the lowest sequence in s; 0 when s is empty.
func (s *Set) Min() uint64 {
	if len(s.b) == 0 {
		return 0
	}
	return s.b[0][0].From
}

// Max is the highest sequence in s; 0 when s is empty.
func (s *Set) Max() uint64 {
	if len(s.b) == 0 {
		return 0
	}
	blk := s.b[len(s.b)-1]
	return blk[len(blk)-1].To
}

// Gaps returns the sequences of lo..hi that are not in s, as ranges in
// ascending order; nothing when lo > hi or lo is 0.
func (s *Set) Gaps(lo, hi uint64) []Range {
	if lo == 0 || lo > hi {
		return nil
	}
	var out []Range
	next := lo
	bi, ri := s.find(lo)
	for ; bi < len(s.b); bi, ri = bi+1, 0 {
		for _, r := range s.b[bi][ri:] {
			if r.From > hi {
				return append(out, Range{next, hi})
			}
			if r.From > next {
				out = append(out, Range{next, r.From - 1})
			}
			if r.To >= hi {
				return out
			}
			next = r.To + 1
		}
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
