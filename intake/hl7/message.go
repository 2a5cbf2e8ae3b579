package hl7

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits of one message's structure. Parse counts against each as it
// reads and refuses at the first crossed, before it keeps anything.
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

// Message is a decoded HL7 v2 message: its segments, with delimiters
// taken from its own MSH. Fields are found, and values decoded (escape
// sequences included), on access (Raw, Get).
type Message struct {
	Enc      Encoding
	Segments []Segment
}

// Segment is one segment: its id, its position among the message's
// segments with that id, and its text, which Raw and Get read fields
// from. For MSH, field 1 is MSH-1 (the field separator) and field 2
// MSH-2, as the standard numbers them.
type Segment struct {
	ID   string
	Seq  int // position among the message's segments with this id, from 1
	text string
	sep  byte
}

// Parse decodes a message. Segments end with CR; a LF or CR LF is taken as
// a segment end too (careless senders). The message must begin with MSH,
// whose fourth and following bytes give its delimiters. Errors name a
// place, never a value.
//
// Parse checks the message's structure against the limits (MaxSegments,
// MaxFields, MaxRepetitions, MaxComponents, MaxSubcomponents) in one pass
// over its bytes before it keeps anything, and refuses at the first limit
// crossed. What it keeps of an accepted message is one copy of its text
// and a Segment per segment: whatever the message holds, a little more
// than its size.
func Parse(b []byte) (*Message, error) {
	if !utf8.Valid(b) {
		// HL7 v2 allows other character sets (MSH-18); this intake takes
		// ASCII and UTF-8 only and says so.
		return nil, &Error{Loc: Location{Segment: "MSH", Seq: 1, Field: 18}, Code: CodeDataType, Msg: "the message is not ASCII or UTF-8"}
	}
	enc, err := encodingOf(b)
	if err != nil {
		return nil, err
	}
	n, err := enc.check(b)
	if err != nil {
		return nil, err
	}
	m := &Message{Enc: enc, Segments: make([]Segment, 0, n)}
	text := string(b)
	for len(text) > 0 {
		if line := nextLine(&text); line != "" {
			m.Segments = append(m.Segments, Segment{ID: segmentID(line, enc.Field), text: line, sep: enc.Field})
		}
	}
	numberSegments(m.Segments)
	return m, nil
}

// numberSegments sets each segment's Seq, its position among the
// segments with its id, through an index sorted by id: four bytes a
// segment, where a map of ids would cost many times that for a message
// of many different ids.
func numberSegments(segs []Segment) {
	idx := make([]int32, len(segs))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return strings.Compare(segs[a].ID, segs[b].ID) })
	seq := 0
	for i, j := range idx {
		if i == 0 || segs[j].ID != segs[idx[i-1]].ID {
			seq = 0
		}
		seq++
		segs[j].Seq = seq
	}
}

// encodingOf reads a message's delimiters from MSH-1 and MSH-2.
func encodingOf(b []byte) (Encoding, error) {
	if len(b) < 8 || string(b[:3]) != "MSH" {
		return Encoding{}, &Error{Loc: Location{Segment: "MSH", Seq: 1}, Code: CodeSegmentSequence, Msg: "the message does not begin with an MSH segment"}
	}
	enc := Encoding{Field: b[3]}
	encEnd := bytes.IndexByte(b[4:], enc.Field)
	if encEnd < 0 {
		return Encoding{}, &Error{Loc: Location{Segment: "MSH", Seq: 1, Field: 2}, Code: CodeRequiredMissing, Msg: "the encoding characters are not followed by a field separator"}
	}
	ec := b[4 : 4+encEnd]
	if len(ec) < 4 || len(ec) > 5 {
		return Encoding{}, &Error{Loc: Location{Segment: "MSH", Seq: 1, Field: 2}, Code: CodeDataType, Msg: "must be 4 encoding characters (component, repetition, escape, subcomponent), or 5 with truncation"}
	}
	enc.Component, enc.Repetition, enc.Escape, enc.Subcomponent = ec[0], ec[1], ec[2], ec[3]
	all := [...]byte{enc.Field, enc.Component, enc.Repetition, enc.Escape, enc.Subcomponent}
	for i, c := range all {
		if c < 0x21 || c > 0x7e || bytes.IndexByte(all[i+1:], c) >= 0 || isAlnum(c) {
			return Encoding{}, &Error{Loc: Location{Segment: "MSH", Seq: 1, Field: 1 + min(i, 1)}, Code: CodeDataType, Msg: "delimiters must be distinct printable punctuation"}
		}
	}
	return enc, nil
}

// nextLine cuts the next segment's text (up to a CR or LF) from text.
func nextLine(text *string) string {
	t := *text
	if i := strings.IndexAny(t, "\r\n"); i >= 0 {
		*text = t[i+1:]
		return t[:i]
	}
	*text = ""
	return t
}

// segmentID is a segment's text up to its first field separator.
func segmentID(line string, sep byte) string {
	if i := strings.IndexByte(line, sep); i >= 0 {
		return line[:i]
	}
	return line
}

// check counts b's segments, and each segment's fields, repetitions,
// components and subcomponents, as it reads, and returns the number of
// segments, or an error naming the place of the first limit crossed (or
// of a segment without a valid id, or a second MSH). It allocates
// nothing but the error.
func (e Encoding) check(b []byte) (int, error) {
	n := 0
	for start := 0; start < len(b); {
		end := len(b)
		if i := bytes.IndexAny(b[start:], "\r\n"); i >= 0 {
			end = start + i
		}
		line := b[start:end]
		start = end + 1
		if len(line) == 0 {
			continue
		}
		n++
		if n > MaxSegments {
			return 0, &Error{Loc: Location{Segment: "MSH", Seq: 1}, Code: CodeSegmentSequence, Msg: fmt.Sprintf("more than %d segments", MaxSegments)}
		}
		id := line
		if i := bytes.IndexByte(line, e.Field); i >= 0 {
			id = line[:i]
		}
		if !validSegmentID(id) {
			return 0, &Error{Loc: Location{Segment: "?", Seq: n}, Code: CodeSegmentSequence, Msg: fmt.Sprintf("segment %d has no valid segment id", n)}
		}
		// The fields of MSH are read after MSH-2, whose text is the
		// delimiters themselves.
		from, field := len(id), 0
		if string(id) == "MSH" {
			if n > 1 {
				return 0, &Error{Loc: Location{Segment: "MSH", Seq: seqOf(b[:end], "MSH", e.Field)}, Code: CodeSegmentSequence, Msg: "a second MSH segment"}
			}
			from = 4 + bytes.IndexByte(line[4:], e.Field)
			field = 2
		}
		if l, msg := e.checkFields(line[from:], field); msg != "" {
			l.Segment, l.Seq = string(id), seqOf(b[:end], string(id), e.Field)
			code := CodeDataType
			if l.Repetition == 0 {
				code = CodeSegmentSequence
			}
			return 0, &Error{Loc: l, Code: code, Msg: msg}
		}
	}
	return n, nil
}

// checkFields counts the delimiters of a segment's text from its first
// field separator on (field is the number of the field before it) and
// returns the place and the text of the first limit crossed (msg "" when
// none is). A place has a repetition only when a limit inside a field
// was crossed.
func (e Encoding) checkFields(text []byte, field int) (Location, string) {
	rep, comp, sub := 1, 1, 1
	for _, c := range text {
		switch c {
		case e.Field:
			field++
			rep, comp, sub = 1, 1, 1
			if field > MaxFields {
				return Location{Field: field}, fmt.Sprintf("more than %d fields", MaxFields)
			}
		case e.Repetition:
			rep++
			comp, sub = 1, 1
			if rep > MaxRepetitions {
				return Location{Field: field, Repetition: rep}, fmt.Sprintf("more than %d repetitions", MaxRepetitions)
			}
		case e.Component:
			comp++
			sub = 1
			if comp > MaxComponents {
				return Location{Field: field, Repetition: rep, Component: comp}, fmt.Sprintf("more than %d components", MaxComponents)
			}
		case e.Subcomponent:
			sub++
			if sub > MaxSubcomponents {
				return Location{Field: field, Repetition: rep, Component: comp, Sub: sub}, fmt.Sprintf("more than %d subcomponents", MaxSubcomponents)
			}
		}
	}
	return Location{}, ""
}

// seqOf is the position of the last segment of b, whose id is id, among
// b's segments with that id: for an error's place, so counted only then.
func seqOf(b []byte, id string, sep byte) int {
	n := 0
	for len(b) > 0 {
		line := b
		if i := bytes.IndexAny(b, "\r\n"); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if i := bytes.IndexByte(line, sep); i >= 0 {
			line = line[:i]
		}
		if string(line) == id {
			n++
		}
	}
	return n
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

func validSegmentID(id []byte) bool {
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

// Fields is the number of s's fields (its last field's number).
func (s *Segment) Fields() int {
	n := strings.Count(s.text, string(s.sep))
	if s.ID == "MSH" {
		n++ // MSH-1 is the separator itself
	}
	return n
}

// Raw is field n of s as sent (escapes not decoded); "" when absent.
func (s *Segment) Raw(n int) string {
	if n <= 0 || len(s.text) <= len(s.ID) {
		return ""
	}
	rest := s.text[len(s.ID)+1:] // after the separator that ends the id
	if s.ID == "MSH" {
		if n == 1 {
			return s.text[3:4]
		}
		n--
	}
	return part(rest, s.sep, n)
}

// Get is the decoded value of field n, repetition rep, component comp,
// subcomponent sub of s (each 1-based; a 0 repetition, component or
// subcomponent means the first). MSH-1 and MSH-2 are returned as sent.
// It returns an *Error naming the place when the value has a malformed
// escape sequence. Parse bounded every part's count, so Get only looks:
// it allocates nothing but a value with escapes.
func (m *Message) Get(s *Segment, n, rep, comp, sub int) (string, error) {
	raw := s.Raw(n)
	if s.ID == "MSH" && n <= 2 {
		return raw, nil
	}
	v := part(raw, m.Enc.Repetition, rep)
	v = part(v, m.Enc.Component, comp)
	v = part(v, m.Enc.Subcomponent, sub)
	out, ok := m.Enc.Unescape(v)
	if !ok {
		loc := Location{Segment: s.ID, Seq: s.Seq, Field: n, Repetition: max(rep, 1), Component: comp, Sub: sub}
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

// part is the i-th (from 1; 0 is 1) of the parts of s separated by sep,
// "" when s has fewer.
func part(s string, sep byte, i int) string {
	for ; i > 1; i-- {
		j := strings.IndexByte(s, sep)
		if j < 0 {
			return ""
		}
		s = s[j+1:]
	}
	if j := strings.IndexByte(s, sep); j >= 0 {
		return s[:j]
	}
	return s
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
