package asap

import (
	"errors"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/movement"
)

// Record is one DSP segment of a file mapped to a movement, or the field
// errors that kept it from being one.
type Record struct {
	Number   int // the DSP's ordinal in the file, from 1
	Segment  int // the DSP's position in the file
	Movement *movement.Movement
	Errors   []FieldError
}

// Units maps DSP-11 (drug dosage units code) to a movement unit.
var Units = map[string]string{"01": "EA", "02": "ML", "03": "GM"}

// Records maps every DSP of f to a dispense movement (see EachRecord). It
// holds them all at once: the drop folder takes them a chunk at a time.
func Records(f *File, fm intake.Formulary, loc *time.Location) []Record {
	var out []Record
	for r := range EachRecord(f, fm, loc) {
		out = append(out, r)
	}
	return out
}

// EachRecord yields every DSP of f mapped to a dispense movement, in
// order, keeping none. Only DSP elements are read: PAT, PRE (the
// prescriber's name, phone and identifiers), AIR and every other segment
// are never looked at. The schedule comes from the formulary; the time is
// the date filled at midnight in loc.
func EachRecord(f *File, fm intake.Formulary, loc *time.Location) iter.Seq[Record] {
	if loc == nil {
		loc = time.Local
	}
	return func(yield func(Record) bool) {
		n := 0
		for s := range f.segments("DSP") {
			n++
			if !yield(record(&s, n, fm, loc)) {
				return
			}
		}
	}
}

func record(s *Segment, n int, fm intake.Formulary, loc *time.Location) Record {
	r := Record{Number: n, Segment: s.Pos}
	bad := func(field, msg string) { r.Errors = append(r.Errors, FieldError{Field: field, Error: msg}) }
	el := func(i int) string { return strings.TrimSpace(s.El(i)) }
	switch el(1) {
	case "", "00":
	case "01", "02":
		bad("DSP01", "revisions (01) and voids (02) are not taken: correct a stored dispense with an adjusting movement")
	default:
		bad("DSP01", "must be 00 (new)")
	}
	rx, filled, refill := el(2), el(5), el(6)
	if rx == "" {
		bad("DSP02", "the prescription number is required")
	}
	var at time.Time
	if filled == "" {
		bad("DSP05", "the date filled is required")
	} else if t, err := time.ParseInLocation("20060102", filled, loc); err != nil || !digits(filled) {
		bad("DSP05", "must be a date CCYYMMDD")
	} else {
		at = t
	}
	if refill == "" {
		bad("DSP06", "the refill number is required (00 for the original fill)")
	} else if v, err := strconv.Atoi(refill); err != nil || !digits(refill) || v > 99 {
		bad("DSP06", "must be a number 00 to 99")
	} else {
		refill = strconv.Itoa(v)
	}
	if q := el(7); q != "01" {
		bad("DSP07", "the product id qualifier must be 01 (NDC)")
	}
	ndc := el(8)
	sched := ""
	if ndc == "" {
		bad("DSP08", "the NDC is required")
	} else if p, known := fm.Lookup(ndc); known {
		sched = p.Schedule
	} else if _, err := movement.CanonicalNDC(ndc); errors.Is(err, movement.ErrNDCAmbiguous) {
		bad("DSP08", "is a bare 10-digit NDC, which is ambiguous (4-4-2, 5-3-2 or 5-4-1) and the formulary lists none or several of the products it may be: send the 11-digit NDC")
	} else if err != nil {
		bad("DSP08", "must be an NDC: 11 digits (5-4-2)")
	} else {
		bad("DSP08", "not in the formulary (intake.formulary): its schedule is unknown")
	}
	q := el(9)
	if q == "" {
		bad("DSP09", "the quantity dispensed is required")
	}
	unit, ok := Units[el(11)]
	if !ok {
		bad("DSP11", "the units code must be 01 (each), 02 (mL) or 03 (grams)")
	}
	if len(r.Errors) > 0 {
		return r
	}
	m := &movement.Movement{
		MovementID: "asap:" + rx + ":" + refill + ":" + filled,
		Type:       movement.TypeDispense,
		NDC:        ndc,
		Quantity:   q,
		Unit:       unit,
		OccurredAt: at.Format(time.RFC3339),
		Schedule:   sched,
		RxRef:      rx,
	}
	r.Movement = m
	return r
}

// fieldOf names the element a movement field came from.
func fieldOf(f string) string {
	switch f {
	case "ndc", "schedule":
		return "DSP08"
	case "quantity":
		return "DSP09"
	case "unit":
		return "DSP11"
	case "occurred_at":
		return "DSP05"
	}
	return "DSP02"
}
