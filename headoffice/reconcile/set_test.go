package reconcile

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

func TestSetAdd(t *testing.T) {
	tests := []struct {
		name  string
		add   []uint64
		want  []Range
		dups  int
		count uint64
	}{
		{"empty", nil, nil, 0, 0},
		{"ascending", []uint64{1, 2, 3, 4}, []Range{{1, 4}}, 0, 4},
		{"gap", []uint64{1, 2, 5, 6}, []Range{{1, 2}, {5, 6}}, 0, 4},
		{"fill the gap", []uint64{1, 3, 2}, []Range{{1, 3}}, 0, 3},
		{"join the next", []uint64{5, 3, 4}, []Range{{3, 5}}, 0, 3},
		{"join the previous", []uint64{1, 5, 2}, []Range{{1, 2}, {5, 5}}, 0, 3},
		{"before everything", []uint64{10, 11, 1}, []Range{{1, 1}, {10, 11}}, 0, 3},
		{"in the middle", []uint64{1, 9, 5}, []Range{{1, 1}, {5, 5}, {9, 9}}, 0, 3},
		{"descending", []uint64{4, 3, 2, 1}, []Range{{1, 4}}, 0, 4},
		{"duplicates", []uint64{1, 2, 2, 1, 7, 7, 5, 5}, []Range{{1, 2}, {5, 5}, {7, 7}}, 4, 4},
		{"the largest", []uint64{^uint64(0), ^uint64(0) - 1, ^uint64(0)}, []Range{{^uint64(0) - 1, ^uint64(0)}}, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Set
			dups := 0
			for _, x := range tt.add {
				if !s.Add(x) {
					dups++
				}
			}
			if !reflect.DeepEqual(s.Ranges(), tt.want) || dups != tt.dups || s.Len() != tt.count {
				t.Errorf("ranges %v (%d dups, len %d), want %v (%d dups, len %d)", s.Ranges(), dups, s.Len(), tt.want, tt.dups, tt.count)
			}
		})
	}
}

func TestSetGaps(t *testing.T) {
	var s Set
	for _, r := range []Range{{3, 5}, {8, 8}, {10, 12}} {
		s.AddRange(r)
	}
	tests := []struct {
		name   string
		lo, hi uint64
		want   []Range
	}{
		{"whole", 1, 15, []Range{{1, 2}, {6, 7}, {9, 9}, {13, 15}}},
		{"up to the last held", 1, 12, []Range{{1, 2}, {6, 7}, {9, 9}}},
		{"from inside a range", 4, 9, []Range{{6, 7}, {9, 9}}},
		{"from a gap", 6, 8, []Range{{6, 7}}},
		{"inside one range", 10, 11, nil},
		{"one missing", 9, 9, []Range{{9, 9}}},
		{"after everything", 20, 22, []Range{{20, 22}}},
		{"empty interval", 5, 4, nil},
		{"from zero", 0, 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.Gaps(tt.lo, tt.hi); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Gaps(%d, %d) = %v, want %v", tt.lo, tt.hi, got, tt.want)
			}
		})
	}
	var empty Set
	if got := empty.Gaps(1, 3); !reflect.DeepEqual(got, []Range{{1, 3}}) {
		t.Errorf("empty.Gaps(1, 3) = %v", got)
	}
	if Count(s.Gaps(1, 15)) != 15-s.Len() {
		t.Errorf("gaps and held do not add up")
	}
}

// TestSetMatchesAMap adds random sequences in random order and compares
// the set with a map, and the gaps with a scan.
func TestSetMatchesAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var s Set
		m := map[uint64]bool{}
		hi, adds := uint64(1+r.IntN(300)), r.IntN(400)
		if round%10 == 0 { // ranges over several blocks
			hi, adds = uint64(1+r.IntN(8*setBlock)), r.IntN(6*setBlock)
		}
		for range adds {
			x := 1 + r.Uint64N(hi)
			if s.Add(x) == m[x] {
				t.Fatalf("round %d: Add(%d) new=%v, map has it %v", round, x, !m[x], m[x])
			}
			m[x] = true
		}
		if s.Len() != uint64(len(m)) {
			t.Fatalf("round %d: len %d, map %d", round, s.Len(), len(m))
		}
		var gaps Set
		for _, g := range s.Gaps(1, hi+2) {
			gaps.AddRange(g)
		}
		for x := uint64(1); x <= hi+2; x++ {
			if s.Contains(x) != m[x] || gaps.Contains(x) == m[x] {
				t.Fatalf("round %d: %d: contains %v, in a gap %v, map %v", round, x, s.Contains(x), gaps.Contains(x), m[x])
			}
		}
		prev := Range{}
		for i, rg := range s.Ranges() {
			if rg.From > rg.To || (i > 0 && rg.From <= prev.To+1) {
				t.Fatalf("round %d: ranges not sorted, disjoint and apart: %v", round, s.Ranges())
			}
			prev = rg
		}
		for range 20 {
			lo := 1 + r.Uint64N(hi+2)
			to := lo + r.Uint64N(hi+3-lo)
			want := true
			for x := lo; x <= to; x++ {
				want = want && m[x]
			}
			if s.ContainsRange(Range{lo, to}) != want {
				t.Fatalf("round %d: ContainsRange(%d..%d) = %v", round, lo, to, !want)
			}
			var n uint64
			for _, g := range s.Gaps(lo, to) {
				for x := g.From; x <= g.To; x++ {
					if m[x] || x < lo || x > to {
						t.Fatalf("round %d: Gaps(%d, %d) has %d", round, lo, to, x)
					}
				}
				n += g.Len()
			}
			for x := lo; x <= to; x++ {
				if !m[x] {
					n--
				}
			}
			if n != 0 {
				t.Fatalf("round %d: Gaps(%d, %d) does not cover every gap", round, lo, to)
			}
		}
	}
}

// TestSetOutOfOrderIsNotQuadratic: a store may publish its archive
// records with Rx-Seq in any order (its credentials let it publish any
// header). Adding 200,000 sequences in descending order, each a range of
// its own, must not copy the whole set at every Add.
func TestSetOutOfOrderIsNotQuadratic(t *testing.T) {
	const n = 200_000
	start := time.Now()
	var s Set
	for i := uint64(n); i >= 1; i-- {
		if !s.Add(2 * i) {
			t.Fatalf("%d not new", 2*i)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("adding %d sequences in descending order took %v", n, d)
	}
	if s.Len() != n || len(s.Ranges()) != n || s.Min() != 2 || s.Max() != 2*n {
		t.Fatalf("len %d, %d ranges, min %d, max %d", s.Len(), len(s.Ranges()), s.Min(), s.Max())
	}
	for i := uint64(1); i <= n; i++ {
		if !s.Contains(2*i) || s.Contains(2*i-1) {
			t.Fatalf("membership of %d or %d wrong", 2*i, 2*i-1)
		}
	}
}
