package hl7

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of one message's structure.
const (
	MaxSegments      = 2000
	MaxFields        = 300 // per segment
	MaxRepetitions   = 100 // per field
	MaxComponents    = 100 // per repetition
	MaxSubcomponents = 100 // per component
)

// Encoding is a message's delimiters, from MSH-1 and MSH-2.
type Encoding struct {
	Field, Component, Repetition, Escape, Subcomponent byte
}

// Standard is the encoding almost every sender uses: |^~\&.
var Standard = Encoding{'|', '^', '~', '\\', '&'}

// Location names a place in a message the way an ERR segment does:
// segment id, its position among the message's segments of that id
// (1-based), field, repetition, component and subcomponent (0 = not
// given). It never carries a value.
type Location struct {
	Segment    string
	Seq        int
	Field      int
	Repetition int
	Component  int
	Sub        int
}

func (l Location) String() string {
	s := l.Segment
	if l.Field > 0 {
		s += fmt.Sprintf("-%d", l.Field)
	}
	if l.Component > 0 {
		s += fmt.Sprintf(".%d", l.Component)
	}
	if l.Sub > 0 {
		s += fmt.Sprintf(".%d", l.Sub)
	}
	return s
}

// Error is a problem at a place in a message. Msg never holds a value
// from the message.
type Error struct {
	Loc  Location
	Code string // HL7 table 0357 code
	Msg  string
}

func (e *Error) Error() string { return "hl7: " + e.Loc.String() + ": " + e.Msg }

// HL7 table 0357 error codes used here.
const (
	CodeSegmentSequence = "100"
	CodeRequiredMissing = "101"
	CodeDataType        = "102"
	CodeTableValue      = "103"
	CodeUnsupportedType = "200"
	CodeInternal        = "207"
	CodeDuplicateKey    = "205"
)

// Message is a decoded HL7 v2 message: its segments, each split into
// fields, with delimiters taken from its own MSH. Values are decoded on
// access (Get), escape sequences included.
type Message struct {
	Enc      Encoding
	Segments []Segment
}

// Segment is one segment; Fields[0] is its id. For MSH, Fields[1] is
// MSH-1 (the field separator) and Fields[2] MSH-2, so Fields[n] is always
// field n.
type Segment struct {
	ID     string
	Seq    int // position among the message's segments with this id, from 1
	Fields []string
}

// Parse decodes a message. Segments end with CR; a LF or CR LF is taken as
// a segment end too (careless senders). The message must begin with MSH,
// whose fourth and following bytes give its delimiters. Errors name a
// place, never a value.
func Parse(b []byte) (*Message, error) {
	if !utf8.Valid(b) {
		// HL7 v2 allows other character sets (MSH-18); this intake takes
		// ASCII and UTF-8 only and says so.
		return nil, &Error{Loc: Location{Segment: "MSH", Seq: 1, Field: 18}, Code: CodeDataType, Msg: "the message is not ASCII or UTF-8"}
	}
	if len(b) < 8 || string(b[:3]) != "MSH" {
		return nil, &Error{Loc: Location{Segment: "MSH", Seq: 1}, Code: CodeSegmentSequence, Msg: "the message does not begin with an MSH segment"}
	}
	enc := Encoding{Field: b[3]}
	encEnd := bytes.IndexByte(b[4:], enc.Field)
	if encEnd < 0 {
		return nil, &Error{Loc: Location{Segment: "MSH", Seq: 1, Field: 2}, Code: CodeRequiredMissing, Msg: "the encoding characters are not followed by a field separator"}
	}
	ec := b[4 : 4+encEnd]
	if len(ec) < 4 || len(ec) > 5 {
		return nil, &Error{Loc: Location{Segment: "MSH", Seq: 1, Field: 2}, Code: CodeDataType, Msg: "must be 4 encoding characters (component, repetition, escape, subcomponent), or 5 with truncation"}
	}
	enc.Component, enc.Repetition, enc.Escape, enc.Subcomponent = ec[0], ec[1], ec[2], ec[3]
	all := []byte{enc.Field, enc.Component, enc.Repetition, enc.Escape, enc.Subcomponent}
	for i, c := range all {
		if c < 0x21 || c > 0x7e || bytes.IndexByte(all[i+1:], c) >= 0 || isAlnum(c) {
			return nil, &Error{Loc: Location{Segment: "MSH", Seq: 1, Field: 1 + min(i, 1)}, Code: CodeDataType, Msg: "delimiters must be distinct printable punctuation"}
		}
	}
	m := &Message{Enc: enc}
	seen := map[string]int{}
	text := string(b)
	for len(text) > 0 {
		var line string
		if i := strings.IndexAny(text, "\r\n"); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			line, text = text, ""
		}
		if line == "" {
			continue
		}
		if len(m.Segments) == MaxSegments {
			return nil, &Error{Loc: Location{Segment: "MSH", Seq: 1}, Code: CodeSegmentSequence, Msg: fmt.Sprintf("more than %d segments", MaxSegments)}
		}
		fields := strings.Split(line, string(enc.Field))
		id := fields[0]
		if !validSegmentID(id) {
			return nil, &Error{Loc: Location{Segment: "?", Seq: len(m.Segments) + 1}, Code: CodeSegmentSequence, Msg: fmt.Sprintf("segment %d has no valid segment id", len(m.Segments)+1)}
		}
		seen[id]++
		seg := Segment{ID: id, Seq: seen[id]}
		if id == "MSH" {
			if len(m.Segments) > 0 {
				return nil, &Error{Loc: Location{Segment: "MSH", Seq: seen[id]}, Code: CodeSegmentSequence, Msg: "a second MSH segment"}
			}
			// fields[1] is MSH-2; MSH-1 is the separator itself.
			fields = append([]string{"MSH", string(enc.Field)}, fields[1:]...)
		}
		if len(fields) > MaxFields+1 {
			return nil, &Error{Loc: Location{Segment: id, Seq: seg.Seq}, Code: CodeSegmentSequence, Msg: fmt.Sprintf("more than %d fields", MaxFields)}
		}
		seg.Fields = fields
		m.Segments = append(m.Segments, seg)
	}
	return m, nil
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

func validSegmentID(id string) bool {
	if len(id) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		c := id[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return id[0] >= 'A' && id[0] <= 'Z'
}

// Find returns the segments with id, in order.
func (m *Message) Find(id string) []*Segment {
	var out []*Segment
	for i := range m.Segments {
		if m.Segments[i].ID == id {
			out = append(out, &m.Segments[i])
		}
	}
	return out
}

// MSH is the message header.
func (m *Message) MSH() *Segment { return &m.Segments[0] }

// Raw is field n of s as sent (escapes not decoded); "" when absent.
func (s *Segment) Raw(n int) string {
	if n <= 0 || n >= len(s.Fields) {
		return ""
	}
	return s.Fields[n]
}

// Get is the decoded value of field n, repetition rep, component comp,
// subcomponent sub of s (each 1-based; a 0 repetition, component or
// subcomponent means the first). MSH-1 and MSH-2 are returned as sent.
// It returns an *Error naming the place when the value has a malformed
// escape sequence or too many parts.
func (m *Message) Get(s *Segment, n, rep, comp, sub int) (string, error) {
	raw := s.Raw(n)
	if s.ID == "MSH" && n <= 2 {
		return raw, nil
	}
	loc := Location{Segment: s.ID, Seq: s.Seq, Field: n, Repetition: max(rep, 1), Component: comp, Sub: sub}
	reps := strings.Split(raw, string(m.Enc.Repetition))
	if len(reps) > MaxRepetitions {
		return "", &Error{Loc: loc, Code: CodeDataType, Msg: fmt.Sprintf("more than %d repetitions", MaxRepetitions)}
	}
	v := pick(reps, rep)
	comps := strings.Split(v, string(m.Enc.Component))
	if len(comps) > MaxComponents {
		return "", &Error{Loc: loc, Code: CodeDataType, Msg: fmt.Sprintf("more than %d components", MaxComponents)}
	}
	v = pick(comps, comp)
	subs := strings.Split(v, string(m.Enc.Subcomponent))
	if len(subs) > MaxSubcomponents {
		return "", &Error{Loc: loc, Code: CodeDataType, Msg: fmt.Sprintf("more than %d subcomponents", MaxSubcomponents)}
	}
	v = pick(subs, sub)
	out, ok := m.Enc.Unescape(v)
	if !ok {
		return "", &Error{Loc: loc, Code: CodeDataType, Msg: "malformed escape sequence"}
	}
	return out, nil
}

// Repetitions is how many repetitions field n of s has (0 when empty).
func (m *Message) Repetitions(s *Segment, n int) int {
	raw := s.Raw(n)
	if raw == "" {
		return 0
	}
	return strings.Count(raw, string(m.Enc.Repetition)) + 1
}

func pick(parts []string, i int) string {
	if i <= 0 {
		i = 1
	}
	if i > len(parts) {
		return ""
	}
	return parts[i-1]
}

// maxEscape bounds one escape sequence's text (\X...\ with hex bytes).
const maxEscape = 512

// Unescape decodes HL7 escape sequences: \F\ \S\ \T\ \R\ \E\ become the
// delimiters, \Xhh...\ the bytes it spells (which must leave valid UTF-8),
// and the formatting and character-set sequences (\H\ \N\ \.br\ \.sp..\
// \Cxxyy\ \Mxxyyzz\ \Z..\) are dropped, since a movement field is plain
// text. ok is false for an unterminated or unknown sequence.
func (e Encoding) Unescape(s string) (string, bool) {
	if strings.IndexByte(s, e.Escape) < 0 {
		return s, true
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, e.Escape)
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		s = s[i+1:]
		j := strings.IndexByte(s, e.Escape)
		if j < 0 || j > maxEscape {
			return "", false
		}
		seq := s[:j]
		s = s[j+1:]
		switch {
		case seq == "F":
			b.WriteByte(e.Field)
		case seq == "S":
			b.WriteByte(e.Component)
		case seq == "T":
			b.WriteByte(e.Subcomponent)
		case seq == "R":
			b.WriteByte(e.Repetition)
		case seq == "E":
			b.WriteByte(e.Escape)
		case seq == "H", seq == "N":
		case len(seq) > 1 && seq[0] == 'X':
			hex := seq[1:]
			if len(hex)%2 != 0 {
				return "", false
			}
			for k := 0; k < len(hex); k += 2 {
				hi, ok1 := unhex(hex[k])
				lo, ok2 := unhex(hex[k+1])
				if !ok1 || !ok2 {
					return "", false
				}
				b.WriteByte(hi<<4 | lo)
			}
		case len(seq) > 1 && (seq[0] == 'C' || seq[0] == 'M' || seq[0] == 'Z' || seq[0] == '.'):
		default:
			return "", false
		}
	}
	out := b.String()
	if !utf8.ValidString(out) {
		return "", false
	}
	return out, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Encode escapes s for a field of a message with encoding e: each
// delimiter becomes its escape sequence, and control characters become
// \X..\ so a value can never end a segment.
func (e Encoding) Encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case e.Field:
			b.WriteString(string(e.Escape) + "F" + string(e.Escape))
		case e.Component:
			b.WriteString(string(e.Escape) + "S" + string(e.Escape))
		case e.Subcomponent:
			b.WriteString(string(e.Escape) + "T" + string(e.Escape))
		case e.Repetition:
			b.WriteString(string(e.Escape) + "R" + string(e.Escape))
		case e.Escape:
			b.WriteString(string(e.Escape) + "E" + string(e.Escape))
		default:
			if c < 0x20 || c == 0x7f {
				fmt.Fprintf(&b, "%cX%02X%c", e.Escape, c, e.Escape)
				continue
			}
			b.WriteByte(c)
		}
	}
	return b.String()
}
