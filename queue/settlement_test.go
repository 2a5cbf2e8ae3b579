package queue

import (
	"slices"
	"testing"
)

func TestSettlementSeqs(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   Settlement
		want []uint64
	}{
		{"empty", Settlement{}, []uint64{}},
		{"release only", Settlement{Release: []uint64{7, 3}}, []uint64{7, 3}},
		{"every kind, in order", Settlement{
			Acks:        []Ack{{Seq: 1}, {Seq: 2}},
			Retries:     []RetryAt{{Seq: 5}},
			Quarantines: []QuarantineAt{{Seq: 4}},
			Release:     []uint64{9},
		}, []uint64{1, 2, 5, 4, 9}},
	} {
		if got := tc.st.Seqs(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
