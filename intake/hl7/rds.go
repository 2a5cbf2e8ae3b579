package hl7

import (
	"strconv"
	"strings"
	"time"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/movement"
)

// Message types taken: pharmacy dispense, original (O01, v2.3) and
// current (O13, v2.4 onwards).
var dispenseTriggers = map[string]bool{"O13": true, "O01": true}

// Dispense is one RXD of a message mapped to a movement, with where each
// movement field came from, so a validation error can name its place.
type Dispense struct {
	Movement *movement.Movement
	rxd      *Segment
	rxe      *Segment
}

// where maps a movement field to the place in the message it came from.
func (d *Dispense) where(field string) Location {
	rxd := Location{Segment: "RXD", Seq: d.rxd.Seq}
	switch field {
	case "ndc":
		rxd.Field, rxd.Component = 2, 1
	case "occurred_at":
		rxd.Field = 3
	case "quantity":
		rxd.Field = 4
	case "unit":
		rxd.Field, rxd.Component = 5, 1
	case "movement_id", "rx_ref":
		rxd.Field = 7
	case "schedule":
		if d.rxe != nil {
			return Location{Segment: "RXE", Seq: d.rxe.Seq, Field: 35}
		}
	}
	return rxd
}

// MaxErrors bounds the errors gathered for one message, and so the ERR
// segments of its acknowledgement: a message with more is refused with
// the first MaxErrors, and its later RXD segments are not read.
const MaxErrors = 100

// Dispenses maps every RXD of an RDS message to a dispense movement (a
// return when the quantity is negative). Only MSH, RXE and RXD are read:
// PID, PV1, NK1, IN1 and every other segment are never looked at. Times
// without an offset are in loc. The schedule is RXE-35 of the RXE before
// the RXD, else the formulary's. Errors name places, never values; there
// are at most MaxErrors.
func Dispenses(m *Message, fm intake.Formulary, loc *time.Location) ([]*Dispense, []*Error) {
	var out []*Dispense
	var errs []*Error
	var rxe *Segment
	for i := range m.Segments {
		s := &m.Segments[i]
		switch s.ID {
		case "ORC":
			rxe = nil // a new order group
		case "RXE":
			rxe = s
		case "RXD":
			d, es := dispense(m, s, rxe, fm, loc)
			errs = append(errs, es...)
			if d != nil {
				out = append(out, d)
			}
		}
		if len(errs) >= MaxErrors {
			return out, errs[:MaxErrors]
		}
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, &Error{Loc: Location{Segment: "RXD", Seq: 1}, Code: CodeSegmentSequence, Msg: "the message has no RXD segment"})
	}
	return out, errs
}

func dispense(m *Message, rxd, rxe *Segment, fm intake.Formulary, loc *time.Location) (*Dispense, []*Error) {
	r := &rdsReader{m: m, rxd: rxd}
	mv := &movement.Movement{Type: movement.TypeDispense}
	mv.MovementID, mv.RxRef = r.id()
	mv.NDC = r.ndc()
	mv.OccurredAt = r.dispensedAt(loc)
	mv.Type, mv.Quantity = r.quantity()
	mv.Unit = r.unit()
	mv.Schedule = r.schedule(rxe)
	if mv.Schedule == "" {
		mv.Schedule = fm.Schedule(mv.NDC)
	}
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	return &Dispense{Movement: mv, rxd: rxd, rxe: rxe}, nil
}

// rdsReader reads one RXD segment's fields (and its RXE's schedule),
// gathering an Error for each that is missing or wrong, by its place.
type rdsReader struct {
	m    *Message
	rxd  *Segment
	errs []*Error
}

func (r *rdsReader) at(f, c int) Location {
	return Location{Segment: "RXD", Seq: r.rxd.Seq, Field: f, Component: c}
}

func (r *rdsReader) get(s *Segment, f, c int) string {
	v, err := r.m.Get(s, f, 1, c, 0)
	if err != nil {
		r.errs = append(r.errs, err.(*Error))
	}
	return strings.TrimSpace(v)
}

func (r *rdsReader) fail(l Location, code, msg string) {
	r.errs = append(r.errs, &Error{Loc: l, Code: code, Msg: msg})
}

func (r *rdsReader) missing(l Location, what string) {
	r.fail(l, CodeRequiredMissing, what+" is required")
}

// id is the movement id, built from the dispense itself (RXD-7, the
// prescription number, and RXD-1, the dispense sub-ID counter), and the
// prescription number as the rx_ref.
func (r *rdsReader) id() (id, rx string) {
	sub := r.get(r.rxd, 1, 0)
	rx = r.get(r.rxd, 7, 0)
	switch {
	case sub == "":
		r.missing(r.at(1, 0), "the dispense sub-ID counter")
	case !digits(sub) || len(sub) > 9:
		r.fail(r.at(1, 0), CodeDataType, "must be a whole number")
	default:
		sub = strings.TrimLeft(sub, "0")
		if sub == "" {
			sub = "0"
		}
	}
	if rx == "" {
		r.missing(r.at(7, 0), "the prescription number")
	}
	return "hl7:" + rx + ":" + sub, rx
}

// ndc is the give code (RXD-2): an NDC as the identifier, or as the
// alternate.
func (r *rdsReader) ndc() string {
	code, system := r.get(r.rxd, 2, 1), strings.ToUpper(r.get(r.rxd, 2, 3))
	if system != "" && system != "NDC" {
		if strings.ToUpper(r.get(r.rxd, 2, 6)) == "NDC" {
			code = r.get(r.rxd, 2, 4)
		} else {
			r.fail(r.at(2, 3), CodeTableValue, "the give code is not an NDC (coding system NDC, as identifier or alternate)")
		}
	}
	if code == "" {
		r.missing(r.at(2, 1), "the NDC")
	}
	return code
}

// dispensedAt is RXD-3 in RFC 3339, in loc when it names no offset.
func (r *rdsReader) dispensedAt(loc *time.Location) string {
	ts := r.get(r.rxd, 3, 1)
	if ts == "" {
		r.missing(r.at(3, 0), "the date/time dispensed")
		return ""
	}
	t, ok := ParseTime(ts, loc)
	if !ok {
		r.fail(r.at(3, 0), CodeDataType, "must be a date/time YYYYMMDDHHMM[SS[.S]][+/-ZZZZ]")
		return ""
	}
	return t.Format(time.RFC3339Nano)
}

// quantity is RXD-4: a negative amount is a return of that many.
func (r *rdsReader) quantity() (typ, q string) {
	q = r.get(r.rxd, 4, 0)
	if q == "" {
		r.missing(r.at(4, 0), "the quantity dispensed")
	} else if neg, ok := strings.CutPrefix(q, "-"); ok {
		return movement.TypeReturn, neg
	}
	return movement.TypeDispense, strings.TrimPrefix(q, "+")
}

// unit is RXD-5 as a movement unit.
func (r *rdsReader) unit() string {
	u := r.get(r.rxd, 5, 1)
	if u == "" {
		r.missing(r.at(5, 1), "the dispense unit")
		return ""
	}
	unit, ok := Unit(u)
	if !ok {
		r.fail(r.at(5, 1), CodeTableValue, "must be EA, ML or GM (or UCUM mL, g)")
	}
	return unit
}

// schedule is RXE-35 when the message has an RXE that gives one.
func (r *rdsReader) schedule(rxe *Segment) string {
	if rxe == nil {
		return ""
	}
	s := r.get(rxe, 35, 1)
	if s == "" {
		return ""
	}
	sched, ok := Schedule(s)
	if !ok {
		r.fail(Location{Segment: "RXE", Seq: rxe.Seq, Field: 35, Component: 1}, CodeTableValue, "must be a dispensable DEA schedule (II, III, IV, V, table 0477)")
	}
	return sched
}

func digits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// Unit maps a dispense unit to a movement unit.
func Unit(u string) (string, bool) {
	switch u {
	case "mL", "ml":
		return "ML", true
	case "g":
		return "GM", true
	}
	switch strings.ToUpper(u) {
	case "EA", "EACH":
		return "EA", true
	case "ML":
		return "ML", true
	case "GM":
		return "GM", true
	}
	return "", false
}

// Schedule maps a DEA schedule as HL7 table 0477 writes it (II, III, IV,
// V), or as C2..C5, CII.., 2..5, to the movement's schedule. Schedule I is
// not dispensable and is refused.
func Schedule(s string) (string, bool) {
	s = strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", ""))
	switch s {
	case "II", "CII", "C2", "2":
		return "CII", true
	case "IIN", "CIIN", "C2N", "2N":
		return "CIIN", true
	case "III", "CIII", "C3", "3":
		return "CIII", true
	case "IIIN", "CIIIN", "C3N", "3N":
		return "CIIIN", true
	case "IV", "CIV", "C4", "4":
		return "CIV", true
	case "V", "CV", "C5", "5":
		return "CV", true
	}
	return "", false
}

// ParseTime reads an HL7 DTM of at least minute precision:
// YYYYMMDDHHMM[SS[.S{1,4}]][+/-ZZZZ]. Without an offset the time is in loc.
func ParseTime(s string, loc *time.Location) (time.Time, bool) {
	off := ""
	if i := strings.IndexAny(s, "+-"); i >= 0 {
		s, off = s[:i], s[i:]
	}
	frac := ""
	if i := strings.IndexByte(s, '.'); i >= 0 {
		s, frac = s[:i], s[i+1:]
		if len(s) != 14 || len(frac) < 1 || len(frac) > 4 || !digits(frac) {
			return time.Time{}, false
		}
	}
	if !digits(s) || (len(s) != 12 && len(s) != 14) {
		return time.Time{}, false
	}
	n := func(a, b int) int { v, _ := strconv.Atoi(s[a:b]); return v }
	sec := 0
	if len(s) == 14 {
		sec = n(12, 14)
	}
	nsec := 0
	if frac != "" {
		f, _ := strconv.Atoi((frac + "000000000")[:9])
		nsec = f
	}
	if off != "" {
		if len(off) != 5 || !digits(off[1:]) {
			return time.Time{}, false
		}
		h, _ := strconv.Atoi(off[1:3])
		m, _ := strconv.Atoi(off[3:5])
		if h > 14 || m > 59 {
			return time.Time{}, false
		}
		secs := h*3600 + m*60
		if off[0] == '-' {
			secs = -secs
		}
		loc = time.FixedZone("", secs)
	}
	y, mo, d, hh, mm := n(0, 4), n(4, 6), n(6, 8), n(8, 10), n(10, 12)
	t := time.Date(y, time.Month(mo), d, hh, mm, sec, nsec, loc)
	// time.Date normalizes out-of-range values; a real time round-trips.
	if t.Year() != y || int(t.Month()) != mo || t.Day() != d || t.Hour() != hh || t.Minute() != mm || t.Second() != sec {
		return time.Time{}, false
	}
	return t, true
}
