package asap

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/rxedge/agent/intake"
)

// parseAllocBound is what Parse may allocate, whatever its input: what TH
// holds and an error, nothing that grows with the file.
const parseAllocBound = 4 << 10

// recordAllocBound is what mapping one DSP record may allocate beyond
// four times the file's size: its segment split, its movement or its
// errors. The drop folder holds ChunkRecords of them at once.
const recordAllocBound = 4 << 10

// allocated is the fewest bytes fn allocated on the heap in three runs:
// the least of three keeps out what other goroutines allocate meanwhile.
func allocated(fn func()) uint64 {
	least := ^uint64(0)
	var before, after runtime.MemStats
	for range 3 {
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// fill is a file of about size bytes: a TH, unit repeated, a TT that
// counts perUnit segments a unit.
func fill(unit string, perUnit, size int) []byte {
	return fillN(unit, perUnit, (size-64)/len(unit))
}

// fillN is a file of unit n times between a TH and a TT that counts
// perUnit segments a unit.
func fillN(unit string, perUnit, n int) []byte {
	head := "TH*4.2B*F1*01**20260302*101500*P**~~\n"
	var b bytes.Buffer
	b.WriteString(head)
	b.WriteString(strings.Repeat(unit, n))
	fmt.Fprintf(&b, "TT*F1*%d~\n", n*perUnit+2)
	return b.Bytes()
}

// TestParseBoundsItsWork: files made of what a decoder pays for
// (terminators, separators, the smallest segments) cost Parse nothing
// that grows with them, and a limit crossed is refused where it is
// crossed. Parse used to split the whole file first: a file of segment
// terminators took 17 times its size in string headers before any limit
// was read, one of the smallest segments 110 times.
func TestParseBoundsItsWork(t *testing.T) {
	const size = 2 << 20
	cases := []struct {
		name, unit string
		perUnit    int
		field      string // of the error; "" when the file is valid
	}{
		{"segment terminators", "~", 0, ""},
		{"terminators and line breaks", "~\r\n", 0, ""},
		{"element separators", "ZZ" + strings.Repeat("*", MaxElements) + "~", 1, ""},
		{"too many elements", "ZZ" + strings.Repeat("*", 4096) + "~", 1, "ZZ"},
		{"the smallest segments", "ZZ~", 1, ""},
		{"empty dispense records", "DSP~", 1, ""},
		{"segment ids that are not", "1~", 1, "segment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := fill(tc.unit, tc.perUnit, size)
			var err error
			n := allocated(func() { _, err = Parse(b) })
			if n > parseAllocBound {
				t.Errorf("Parse of %d bytes allocated %d bytes, want at most %d", len(b), n, parseAllocBound)
			}
			var pe *ParseError
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.field != "" && (!errors.As(err, &pe) || pe.Field != tc.field):
				t.Errorf("error %v, want one on %s", err, tc.field)
			}
		})
	}
	// More segments than MaxSegments: refused at the limit, not after.
	b := fillN("ZZ~", 1, MaxSegments+16)
	var err error
	n := allocated(func() { _, err = Parse(b) })
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Field != "file" || !strings.Contains(pe.Error(), "more than") {
		t.Errorf("%d segments: %v, want the segment limit", MaxSegments+16, err)
	}
	if n > parseAllocBound {
		t.Errorf("Parse of %d segments allocated %d bytes, want at most %d", MaxSegments+16, n, parseAllocBound)
	}
}

// TestCompleteAllocatesNothing: the completion rule is looked at for
// every file at every scan.
func TestCompleteAllocatesNothing(t *testing.T) {
	for _, b := range [][]byte{
		fill("~", 0, 1<<20),
		fill("ZZ~", 1, 1<<20),
		append(bytes.Repeat([]byte("TH*"), 1<<18), '~'),
		append([]byte("TH*4.2B*F1*01**20260302*101500*P**~~"), bytes.Repeat([]byte("\n"), 1<<20)...),
	} {
		if n := allocated(func() { Complete(b) }); n != 0 {
			t.Errorf("Complete of %q… allocated %d bytes", b[:16], n)
		}
	}
}

// TestSegmentsAndRecords: the segments after TH come one at a time, in
// order, with their positions; records are the DSPs among them.
func TestSegmentsAndRecords(t *testing.T) {
	b := []byte("TH*4.2A*C1*01**20260302*101500*P**~~\nIS*1*X*~\n\nPAT*NY~DSP*00*RX1*20260301*0*20260301*00*01*00406055262*10**01~\r\nDSP~TT*C1*6~\n")
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.SegmentCount != 6 || f.DSPCount != 2 || f.Version != "4.2A" || f.ControlNumber != "C1" {
		t.Fatalf("%+v", f)
	}
	var got []string
	for s := range f.Segments() {
		got = append(got, fmt.Sprintf("%s@%d/%d", s.ID, s.Pos, len(s.Elements)))
	}
	if want := "IS@2/4 PAT@3/2 DSP@4/12 DSP@5/1 TT@6/3"; strings.Join(got, " ") != want {
		t.Errorf("segments %s, want %s", strings.Join(got, " "), want)
	}
	recs := Records(f, intake.Formulary{"00406-0552-62": {Schedule: "CII"}}, nil)
	if len(recs) != 2 || recs[0].Movement == nil || recs[0].Segment != 4 || recs[1].Number != 2 || recs[1].Segment != 5 || len(recs[1].Errors) == 0 {
		t.Errorf("records %+v", recs)
	}
}

// TestParseErrors: what is wrong with a file as a whole, and where.
func TestParseErrors(t *testing.T) {
	th := "TH*4.2A*C1*01**20260302*101500*P**~~"
	for _, tc := range []struct{ body, field string }{
		{"TX*4.2A~", "TH"},
		{"TH*4.2A*C1*01**2026~~", "TH09"},
		{th + "\xff~TT*C1*2~", "file"},
		{th + "IS*1~", "TT"},
		{th + "TT*C2*2~", "TT01"},
		{th + "TT*C1*x~", "TT02"},
		{th + "TT*C1*00000000002~", "TT02"},
		{th + "TT*C1*0000000002~", ""},
		{th + "TT*C1*3~", "TT02"},
		{th + "TT*C1*2~TT*C1*3~", "TT"},
		{th + "TH*4.2A~TT*C1*3~", "TH"},
		{th + "is*1~TT*C1*3~", "segment"},
		{strings.Replace(th, "4.2A", "4.1", 1) + "TT*C1*2~", "TH01"},
		{strings.Replace(th, "*C1*", "**", 1) + "TT**2~", "TH02"},
	} {
		_, err := Parse([]byte(tc.body))
		var pe *ParseError
		if tc.field == "" {
			if err != nil {
				t.Errorf("%q: %v, want it taken", tc.body, err)
			}
			continue
		}
		if !errors.As(err, &pe) || pe.Field != tc.field {
			t.Errorf("%q: %v, want an error on %s", tc.body, err, tc.field)
		}
	}
}
