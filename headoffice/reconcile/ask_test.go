package reconcile

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/rxedge/agent/central/command"
)

func TestChunk(t *testing.T) {
	tests := []struct {
		name      string
		in        []Range
		maxSeqs   uint64
		maxRanges int
		want      [][]Range
	}{
		{"none", nil, 10, 10, nil},
		{"fits", []Range{{1, 3}, {7, 7}}, 10, 10, [][]Range{{{1, 3}, {7, 7}}}},
		{"split a range", []Range{{1, 25}}, 10, 10, [][]Range{{{1, 10}}, {{11, 20}}, {{21, 25}}}},
		{"split across ranges", []Range{{1, 6}, {9, 14}}, 10, 10, [][]Range{{{1, 6}, {9, 12}}, {{13, 14}}}},
		{"too many ranges", []Range{{1, 1}, {3, 3}, {5, 5}}, 10, 2, [][]Range{{{1, 1}, {3, 3}}, {{5, 5}}}},
		{"exactly full", []Range{{1, 10}, {12, 12}}, 10, 10, [][]Range{{{1, 10}}, {{12, 12}}}},
		{"the largest", []Range{{^uint64(0) - 2, ^uint64(0)}}, 2, 10, [][]Range{{{^uint64(0) - 2, ^uint64(0) - 1}}, {{^uint64(0), ^uint64(0)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := chunk(tt.in, tt.maxSeqs, tt.maxRanges)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("chunk = %v, want %v", got, tt.want)
			}
		})
	}
	a, b := halve([]Range{{1, 3}, {10, 12}})
	if !reflect.DeepEqual(a, []Range{{1, 3}}) || !reflect.DeepEqual(b, []Range{{10, 12}}) {
		t.Errorf("halve = %v, %v", a, b)
	}
}

// TestCheckAnswer: what a store answers is believed only when it covers
// exactly what was asked, in known states with bounded reasons.
func TestCheckAnswer(t *testing.T) {
	req := []Range{{3, 5}, {9, 9}}
	run := func(from, to uint64, state, reason string) command.SeqRun {
		return command.SeqRun{From: from, To: to, State: state, Reason: reason}
	}
	tests := []struct {
		name string
		res  command.ReconcileResult
		bad  string // "" when well formed
	}{
		{"good", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(3, 3, "pending", ""), run(4, 5, "quarantined", "permanent:too_large"), run(9, 9, "synced", "recent")}}, ""},
		{"one run per range", command.ReconcileResult{Highest: 20, Runs: []command.SeqRun{run(3, 5, "purged", "by local:x: y"), run(9, 9, "unknown", "pruned")}}, ""},
		{"not assigned", command.ReconcileResult{Highest: 5, Runs: []command.SeqRun{run(3, 5, "pending", ""), run(9, 9, "unknown", "not_assigned")}}, ""},
		{"empty", command.ReconcileResult{Highest: 9}, "does not cover"},
		{"short", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(3, 5, "pending", "")}}, "does not cover"},
		{"across a gap", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(3, 9, "pending", "")}}, "not asked"},
		{"not asked", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(3, 5, "pending", ""), run(10, 10, "pending", "")}}, "not asked"},
		{"twice", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(3, 5, "pending", ""), run(5, 5, "pending", ""), run(9, 9, "pending", "")}}, "out of order"},
		{"descending", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(9, 9, "pending", ""), run(3, 5, "pending", "")}}, "out of order"},
		{"reversed run", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(5, 3, "pending", ""), run(9, 9, "pending", "")}}, "out of order"},
		{"zero", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(0, 5, "pending", ""), run(9, 9, "pending", "")}}, "out of order"},
		{"unknown state", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(3, 5, "lost", ""), run(9, 9, "pending", "")}}, "unknown state"},
		{"synced reason", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(3, 5, "synced", "trust me"), run(9, 9, "pending", "")}}, "synced run"},
		{"pruned above highest", command.ReconcileResult{Highest: 4, Runs: []command.SeqRun{run(3, 5, "unknown", "pruned"), run(9, 9, "unknown", "not_assigned")}}, "contradicts"},
		{"not assigned below highest", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(3, 5, "pending", ""), run(9, 9, "unknown", "not_assigned")}}, "contradicts"},
		{"long reason", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(3, 5, "quarantined", strings.Repeat("x", 500)), run(9, 9, "pending", "")}}, "too long"},
		{"control characters", command.ReconcileResult{Highest: 9, Runs: []command.SeqRun{run(3, 5, "quarantined", "a\x1b[2Jb"), run(9, 9, "pending", "")}}, "not printable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkAnswer(req, tt.res)
			if (tt.bad == "") != (got == "") || !strings.Contains(got, tt.bad) {
				t.Errorf("checkAnswer = %q, want %q", got, tt.bad)
			}
		})
	}
}

func TestBloomFindsEveryKeySeenTwice(t *testing.T) {
	b := newBloom(10_000, 0)
	var k [16]byte
	fp := 0
	for i := range 10_000 {
		k[0], k[1], k[8], k[9] = byte(i), byte(i>>8), byte(i*7), byte(i>>3)
		if b.addSeen(k) {
			fp++
		}
	}
	for i := range 10_000 {
		k[0], k[1], k[8], k[9] = byte(i), byte(i>>8), byte(i*7), byte(i>>3)
		if !b.addSeen(k) {
			t.Fatalf("key %d added before is not seen", i)
		}
	}
	if fp > 100 {
		t.Errorf("%d false positives in 10,000 keys, want about 0.05%%", fp)
	}
}

// TestCheckAnswerBelievesOnlyExactCover sends random answers to random
// requests: checkAnswer never panics, and whatever it accepts covers
// every sequence asked exactly once and nothing else.
func TestCheckAnswerBelievesOnlyExactCover(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	states := []string{command.SeqPending, command.SeqQuarantined, command.SeqPurged, command.SeqSynced, command.SeqUnknown, "lost"}
	reasons := []string{"", command.SeqRecent, command.SeqPruned, command.SeqNotAssigned, "permanent:too_large"}
	accepted := 0
	for range 20_000 {
		var asked Set
		var req []Range
		for x := uint64(1 + r.IntN(3)); x < 30 && len(req) < 4; x += uint64(2 + r.IntN(6)) {
			rg := Range{x, x + uint64(r.IntN(4))}
			req = append(req, rg)
			asked.AddRange(rg)
			x = rg.To
		}
		res := command.ReconcileResult{Highest: uint64(r.IntN(40))}
		if r.IntN(2) == 0 {
			// Often right: the request itself, in random states.
			for _, rg := range req {
				res.Runs = append(res.Runs, command.SeqRun{From: rg.From, To: rg.To, State: states[r.IntN(5)], Reason: reasons[r.IntN(len(reasons))]})
			}
		}
		for range r.IntN(3) {
			from := uint64(r.IntN(35))
			res.Runs = append(res.Runs, command.SeqRun{From: from, To: from + uint64(r.IntN(5)) - 1, State: states[r.IntN(len(states))], Reason: reasons[r.IntN(len(reasons))]})
		}
		if checkAnswer(req, res) != "" {
			continue
		}
		accepted++
		var got Set
		for _, run := range res.Runs {
			for x := run.From; x <= run.To; x++ {
				if !asked.Contains(x) || !got.Add(x) {
					t.Fatalf("accepted %+v for %v: %d not asked or twice", res, req, x)
				}
			}
		}
		if got.Len() != asked.Len() {
			t.Fatalf("accepted %+v for %v: covers %d of %d", res, req, got.Len(), asked.Len())
		}
	}
	if accepted == 0 {
		t.Error("no answer was accepted: the test does not test acceptance")
	}
}
