package hl7

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/intake"
)

// What decoding may allocate (Parse, then Dispenses on what it accepted),
// for any message: decodeBytesPerByte per byte of it plus
// decodeBytesFixed. The most per byte is spent on the smallest segments
// (a Segment and its index entry for every four bytes) and the smallest
// valid RXD segments (a movement for every forty); the fixed part holds
// the errors of a refused message, at most MaxErrors of them whatever
// its size. At the largest accepted size the limits keep it near one
// byte per byte.
const (
	decodeBytesPerByte = 24
	decodeBytesFixed   = 32 << 10
)

// allocated is the bytes f allocates on the heap: the least of three
// runs, so that what another goroutine of the test binary allocates
// meanwhile does not count.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	least := ^uint64(0)
	for range 3 {
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// TestParseBoundsItsWorkBeforeItAllocates decodes messages of the largest
// accepted size (max_message_bytes, 1 MiB) made of one delimiter each:
// one that crosses a limit is refused, naming the place, having allocated
// next to nothing (a decoder that splits first allocates 16 bytes per
// separator, 32 times the message); one within the limits costs at most
// twice its size.
func TestParseBoundsItsWorkBeforeItAllocates(t *testing.T) {
	const size = intake.DefaultMaxMessageBytes
	const msh = "MSH|^~\\&|"
	fill := func(unit string) []byte {
		b := []byte(msh)
		return append(b, bytes.Repeat([]byte(unit), (size-len(b))/len(unit))...)
	}
	refused := []struct {
		name string
		msg  []byte
		loc  Location
	}{
		{"field separators", fill("|"), Location{Segment: "MSH", Seq: 1, Field: MaxFields + 1}},
		{"repetitions", fill("~"), Location{Segment: "MSH", Seq: 1, Field: 3, Repetition: MaxRepetitions + 1}},
		{"components", fill("^"), Location{Segment: "MSH", Seq: 1, Field: 3, Repetition: 1, Component: MaxComponents + 1}},
		{"subcomponents", fill("&"), Location{Segment: "MSH", Seq: 1, Field: 3, Repetition: 1, Component: 1, Sub: MaxSubcomponents + 1}},
		{"segments", fill("\rZZZ"), Location{Segment: "MSH", Seq: 1}},
		{"fields of a later segment", append([]byte(msh+"\rPID|1\rPID"), fill("|")[len(msh):]...), Location{Segment: "PID", Seq: 2, Field: MaxFields + 1}},
	}
	for _, c := range refused {
		var err error
		n := allocated(func() { _, err = Parse(c.msg) })
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: Parse = %v, want an *Error", c.name, err)
			continue
		}
		t.Logf("%s: %d bytes refused (%v), %d bytes allocated", c.name, len(c.msg), err, n)
		if e.Loc != c.loc {
			t.Errorf("%s: refused at %+v, want %+v", c.name, e.Loc, c.loc)
		}
		if n > 1<<10 {
			t.Errorf("%s: %d bytes allocated to refuse a %d-byte message, more than 1 KiB", c.name, n, len(c.msg))
		}
	}
	accepted := map[string][]byte{
		"segment ends":                  fill("\r"),
		"the most fields":               []byte(msh + strings.Repeat("\rZZZ"+strings.Repeat("|", MaxFields), MaxSegments-1)),
		"the most repetitions":          []byte(msh + strings.Repeat("\rZZZ|"+strings.Repeat("~", MaxRepetitions-1), MaxSegments-1)),
		"the most segments, each small": []byte(msh + strings.Repeat("\rZZZ", MaxSegments-1)),
	}
	for name, msg := range accepted {
		var err error
		n := allocated(func() { _, err = Parse(msg) })
		t.Logf("%s: %d bytes accepted, %d bytes allocated (%.2f a byte)", name, len(msg), n, float64(n)/float64(len(msg)))
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if n > decodeBytesPerByte*uint64(len(msg))+decodeBytesFixed || (len(msg) > size/2 && n > 2*uint64(len(msg))) {
			t.Errorf("%s: %d bytes allocated for %d bytes", name, n, len(msg))
		}
	}
}

// checkDecodeBound decodes b as the handler does (Parse, then Dispenses
// when it parses, every field read as well) and fails when that
// allocates more than the bound.
func checkDecodeBound(t *testing.T, b []byte) {
	t.Helper()
	n := allocated(func() {
		m, err := Parse(b)
		if err != nil {
			return
		}
		for i := range m.Segments {
			for f := range min(m.Segments[i].Fields()+1, 40) {
				m.Get(&m.Segments[i], f, 1, 1, 1)
			}
		}
		Dispenses(m, nil, time.UTC)
	})
	if limit := decodeBytesPerByte*uint64(len(b)) + decodeBytesFixed; n > limit {
		t.Fatalf("decoding %d bytes allocated %d bytes, more than %d a byte and %d", len(b), n, decodeBytesPerByte, decodeBytesFixed)
	}
}

// TestDecodeBoundOnTheSmallest: the inputs that cost the most per byte,
// segments of an id alone (all different) and the smallest valid RXD
// segments, as many as a message may hold.
func TestDecodeBoundOnTheSmallest(t *testing.T) {
	ids := []byte("MSH|^~\\&|A|B|C|D|20260301||RDS^O13|C1|P|2.5")
	for i := range MaxSegments - 1 {
		ids = append(ids, '\r', 'A'+byte(i/100%26), '0'+byte(i/10%10), '0'+byte(i%10))
	}
	checkDecodeBound(t, ids)
	rxd := "\rRXD|1|1234-5678-90|202603010930|1|EA||R"
	checkDecodeBound(t, []byte("MSH|^~\\&|A|B|C|D|20260301||RDS^O13|C1|P|2.5"+strings.Repeat(rxd, MaxSegments-1)))
	checkDecodeBound(t, []byte("MSH|^~\\&|A|B|C|D|20260301||RDS^O13|C1|P|2.5"+strings.Repeat("\rRXD", MaxSegments-1)))
}

// TestAckListsAtMostMaxErrors: a message whose every dispense is wrong,
// in the mapping or in validation, is answered with the first MaxErrors
// errors, however many dispenses it holds.
func TestAckListsAtMostMaxErrors(t *testing.T) {
	h, _ := newHandler(t)
	head := "MSH|^~\\&|A|B|C|D|20260301||RDS^O13^RDS_O13|C1|P|2.5.1"
	for name, rxd := range map[string]string{
		"missing fields": "\rRXD",
		"a bad NDC":      "\rRXD|1|1234^^NDC|202603010930|1|EA||R%d",
	} {
		var b strings.Builder
		b.WriteString(head)
		for i := range MaxSegments - 1 {
			if strings.Contains(rxd, "%d") {
				fmt.Fprintf(&b, rxd, i)
			} else {
				b.WriteString(rxd)
			}
		}
		ack, out := h.Handle([]byte(b.String()))
		code, _, errs := ackParts(t, ack)
		if code != AE || out.Code != AE || len(errs) != MaxErrors {
			t.Errorf("%s: %s with %d ERR segments, want AE with %d", name, code, len(errs), MaxErrors)
		}
	}
}
