package asap

import (
	"bytes"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of one file's structure. Parse counts segments and elements as it
// walks the file and refuses it at the first limit crossed; it keeps no
// segment, so a limit bounds work, not memory: the file itself is the only
// thing of its size in memory.
const (
	// MaxSegments bounds the segments of a file, TH and TT included. A
	// 64 MiB file (max_file_bytes' default) of real records, around 60
	// bytes a segment, has about a million.
	MaxSegments = 4 << 20
	MaxElements = 40 // per segment, the segment id not counted
	// maxTHBytes bounds where TH-09 (the segment terminator) may be.
	maxTHBytes = 1024
	// maxCountDigits bounds TT-02, the count of segments (ASAP gives it ten
	// digits).
	maxCountDigits = 10
)

// Versions taken (TH-01).
var Versions = map[string]bool{"4.2A": true, "4.2B": true}

// Segment is one segment of a file: its id, its position in the file
// (1-based, counting every segment) and its elements; Elements[n] is
// element n (Elements[0] is the id).
type Segment struct {
	ID       string
	Pos      int
	Elements []string
}

// El is element n, "" when absent.
func (s *Segment) El(n int) string {
	if n <= 0 || n >= len(s.Elements) {
		return ""
	}
	return s.Elements[n]
}

// File is a decoded ASAP file: what TH and TT say, and the file itself,
// whose segments Segments cuts out one at a time.
type File struct {
	Version       string
	ElementSep    byte // the byte after "TH"
	SegmentTerm   byte // TH-09
	ControlNumber string
	// SegmentCount counts every segment, TH and TT included (TT-02).
	SegmentCount int
	// DSPCount counts the DSP segments, each a dispense record.
	DSPCount int

	data []byte // the file, as given to Parse
	body int    // where the segments after TH begin in data
}

// FieldError is a problem with one element, named ASAP style (DSP08),
// never with its value.
type FieldError struct {
	Field string `json:"field"`
	Error string `json:"error"`
}

// ParseError is a problem with the file as a whole.
type ParseError struct {
	FieldError
	Segment int // position of the segment, 0 for the file
}

func (e *ParseError) Error() string {
	if e.Segment > 0 {
		return fmt.Sprintf("asap: segment %d: %s: %s", e.Segment, e.Field, e.FieldError.Error)
	}
	return fmt.Sprintf("asap: %s: %s", e.Field, e.FieldError.Error)
}

func perr(seg int, field, format string, args ...any) *ParseError {
	return &ParseError{FieldError: FieldError{Field: field, Error: fmt.Sprintf(format, args...)}, Segment: seg}
}

// Complete reports whether b holds a whole file: it begins with a TH
// segment and its last segment, after trailing white space, is a TT
// trailer. This is the completion rule of the drop folder: a file still
// being written lacks its TT. It allocates nothing, and reads b at most
// twice from its end (delimiters reads only its first maxTHBytes).
func Complete(b []byte) bool {
	if len(b) < 12 || string(b[:2]) != "TH" {
		return false
	}
	sep, term, ok := delimiters(b)
	if !ok {
		return false
	}
	t := bytes.TrimRight(b, " \t\r\n")
	if len(t) == 0 || t[len(t)-1] != term {
		return false
	}
	t = t[:len(t)-1]
	i := bytes.LastIndexByte(t, term)
	last := bytes.TrimLeft(t[i+1:], " \t\r\n")
	return bytes.HasPrefix(last, []byte{'T', 'T', sep})
}

// delimiters reads the element separator (the byte after "TH") and the
// segment terminator (TH-09, which also ends the TH segment), looking at
// the first maxTHBytes of b only.
func delimiters(b []byte) (sep, term byte, ok bool) {
	_, sep, term, ok = thEnd(b)
	return sep, term, ok
}

// thEnd finds TH-09 within the first maxTHBytes of b: end is the index of
// the terminator that ends TH (TH-09's character is end-1).
func thEnd(b []byte) (end int, sep, term byte, ok bool) {
	if len(b) < 3 {
		return 0, 0, 0, false
	}
	sep = b[2]
	if sep < 0x21 || sep > 0x7e || isAlnum(sep) {
		return 0, 0, 0, false
	}
	// TH-09 follows the ninth separator of TH; the terminator itself then
	// ends the segment.
	n := 0
	for i := 2; i < len(b) && i < maxTHBytes; i++ {
		if b[i] != sep {
			continue
		}
		if n++; n < 9 {
			continue
		}
		if i+2 >= len(b) || b[i+1] != b[i+2] {
			return 0, 0, 0, false
		}
		term = b[i+1]
		if term == sep || isAlnum(term) || term == ' ' {
			return 0, 0, 0, false
		}
		return i + 2, sep, term, true
	}
	return 0, 0, 0, false
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// cursor walks the segments of a file: the pieces between terminators,
// trimmed of white space, empty ones skipped. It allocates nothing.
type cursor struct {
	rest []byte
	term byte
}

func (c *cursor) next() ([]byte, bool) {
	for len(c.rest) > 0 {
		var seg []byte
		if i := bytes.IndexByte(c.rest, c.term); i >= 0 {
			seg, c.rest = c.rest[:i], c.rest[i+1:]
		} else {
			seg, c.rest = c.rest, nil
		}
		if seg = bytes.Trim(seg, " \t\r\n"); len(seg) > 0 {
			return seg, true
		}
	}
	return nil, false
}

// element is element n of seg (0 is the id), nil when absent.
func element(seg []byte, sep byte, n int) []byte {
	for ; n > 0; n-- {
		i := bytes.IndexByte(seg, sep)
		if i < 0 {
			return nil
		}
		seg = seg[i+1:]
	}
	if i := bytes.IndexByte(seg, sep); i >= 0 {
		return seg[:i]
	}
	return seg
}

// Parse decodes a complete file: delimiters from TH, every segment's id
// and element count checked, the version (TH-01) one of Versions, and the
// TT trailer checked: TT-01 equals TH-02 and TT-02 counts every segment
// from TH to TT. Line breaks after a segment terminator are allowed.
// Errors name elements, never values.
//
// Parse walks b once and refuses it at the first limit crossed, allocating
// only what TH holds: whatever b is, its memory does not grow with b. The
// File refers to b, which must not change while the File is used.
func Parse(b []byte) (*File, error) {
	if !utf8.Valid(b) {
		return nil, perr(0, "file", "is not ASCII or UTF-8 text")
	}
	if len(b) < 12 || string(b[:2]) != "TH" {
		return nil, perr(1, "TH", "the file does not begin with a TH segment")
	}
	end, sep, term, ok := thEnd(b)
	if !ok {
		return nil, perr(1, "TH09", "no valid segment terminator: TH09 must be one character, which also ends the TH segment")
	}
	f := &File{ElementSep: sep, SegmentTerm: term, data: b, body: end + 1}
	w, err := f.walk()
	if err != nil {
		return nil, err
	}
	th := b[:end]
	f.Version = string(element(th, sep, 1))
	if !Versions[f.Version] {
		return nil, perr(1, "TH01", "the version must be 4.2A or 4.2B")
	}
	f.ControlNumber = string(element(th, sep, 2))
	if f.ControlNumber == "" {
		return nil, perr(1, "TH02", "the transaction control number is required")
	}
	if err := f.trailer(w.last); err != nil {
		return nil, err
	}
	if w.dupPos > 0 && w.dupPos != f.SegmentCount {
		return nil, perr(w.dupPos, w.dupID, "a second %s segment", w.dupID)
	}
	return f, nil
}

// walked is what walk found beside the counts: the last segment, and the
// first TH or TT after the first segment.
type walked struct {
	last   []byte
	dupPos int
	dupID  string
}

// walk counts the segments after TH, checking each one's id and number of
// elements as it goes.
func (f *File) walk() (walked, error) {
	var w walked
	f.SegmentCount = 1 // TH
	c := cursor{rest: f.data[f.body:], term: f.SegmentTerm}
	for seg, ok := c.next(); ok; seg, ok = c.next() {
		if f.SegmentCount == MaxSegments {
			return w, perr(0, "file", "more than %d segments", MaxSegments)
		}
		f.SegmentCount++
		pos := f.SegmentCount
		id := element(seg, f.ElementSep, 0)
		if !validID(id) {
			return w, perr(pos, "segment", "segment %d has no valid segment id", pos)
		}
		if bytes.Count(seg, []byte{f.ElementSep}) > MaxElements {
			return w, perr(pos, string(id), "more than %d elements", MaxElements)
		}
		switch string(id) {
		case "DSP":
			f.DSPCount++
		case "TH", "TT":
			if w.dupPos == 0 {
				w.dupPos, w.dupID = pos, string(id)
			}
		}
		w.last = seg
	}
	return w, nil
}

// trailer checks the last segment: a TT whose TT-01 is TH-02 and whose
// TT-02 counts the segments.
func (f *File) trailer(last []byte) error {
	pos := f.SegmentCount
	if string(element(last, f.ElementSep, 0)) != "TT" {
		return perr(pos, "TT", "the file does not end with a TT trailer")
	}
	if string(element(last, f.ElementSep, 1)) != f.ControlNumber {
		return perr(pos, "TT01", "does not match TH02")
	}
	c := element(last, f.ElementSep, 2)
	if len(c) == 0 || len(c) > maxCountDigits || !digits(string(c)) {
		return perr(pos, "TT02", "must be the number of segments")
	}
	count, _ := strconv.Atoi(string(c))
	if count != f.SegmentCount {
		return perr(pos, "TT02", "counts %d segments, the file has %d", count, f.SegmentCount)
	}
	return nil
}

// Segments yields the file's segments after TH in order, each split into
// its elements; each costs its own size, and nothing is kept between
// them.
func (f *File) Segments() iter.Seq[Segment] { return f.segments("") }

// segments yields the segments after TH whose id is only ("" for all):
// others are skipped unsplit.
func (f *File) segments(only string) iter.Seq[Segment] {
	return func(yield func(Segment) bool) {
		c := cursor{rest: f.data[f.body:], term: f.SegmentTerm}
		pos := 1
		for seg, ok := c.next(); ok; seg, ok = c.next() {
			pos++
			if only != "" && string(element(seg, f.ElementSep, 0)) != only {
				continue
			}
			els := strings.Split(string(seg), string(f.ElementSep))
			if !yield(Segment{ID: els[0], Pos: pos, Elements: els}) {
				return
			}
		}
	}
}

func validID(id []byte) bool {
	if len(id) < 2 || len(id) > 3 {
		return false
	}
	for _, c := range id {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

func digits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
