package asap

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of one file's structure.
const (
	MaxSegments = 4 << 20
	MaxElements = 40 // per segment
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

// File is a decoded ASAP file.
type File struct {
	Version          string
	ElementSep       byte // the byte after "TH"
	SegmentTerm      byte // TH-09
	ControlNumber    string
	Segments         []Segment
	TrailerSegCount  int
	trailerCountSeen string
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
// being written lacks its TT.
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
// segment terminator (TH-09, which also ends the TH segment).
func delimiters(b []byte) (sep, term byte, ok bool) {
	sep = b[2]
	if sep < 0x21 || sep > 0x7e || isAlnum(sep) {
		return 0, 0, false
	}
	// TH-09 follows the ninth separator of TH; the terminator itself then
	// ends the segment.
	n := 0
	for i := 2; i < len(b) && i < 1024; i++ {
		if b[i] == sep {
			n++
			if n == 9 {
				if i+2 >= len(b) || b[i+1] != b[i+2] {
					return 0, 0, false
				}
				term = b[i+1]
				if term == sep || isAlnum(term) || term == ' ' {
					return 0, 0, false
				}
				return sep, term, true
			}
		}
	}
	return 0, 0, false
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// Parse decodes a complete file: delimiters from TH, every segment split
// into elements, the version (TH-01) one of Versions, and the TT trailer
// checked: TT-01 equals TH-02 and TT-02 counts every segment from TH to TT.
// Line breaks after a segment terminator are allowed. Errors name elements,
// never values.
func Parse(b []byte) (*File, error) {
	if !utf8.Valid(b) {
		return nil, perr(0, "file", "is not ASCII or UTF-8 text")
	}
	if len(b) < 12 || string(b[:2]) != "TH" {
		return nil, perr(1, "TH", "the file does not begin with a TH segment")
	}
	sep, term, ok := delimiters(b)
	if !ok {
		return nil, perr(1, "TH09", "no valid segment terminator: TH09 must be one character, which also ends the TH segment")
	}
	f := &File{ElementSep: sep, SegmentTerm: term}
	text := string(b)
	// TH-09 is the terminator itself: cut TH before splitting.
	n := 0
	i := 0
	for ; i < len(text); i++ {
		if text[i] == sep {
			n++
			if n == 9 {
				break
			}
		}
	}
	th := text[:i+2] // through TH-09's character
	rest := text[i+3:]
	parts := strings.Split(th, string(sep))
	f.Segments = append(f.Segments, Segment{ID: "TH", Pos: 1, Elements: parts})
	for _, raw := range strings.Split(rest, string(term)) {
		raw = strings.Trim(raw, " \t\r\n")
		if raw == "" {
			continue
		}
		if len(f.Segments) == MaxSegments {
			return nil, perr(0, "file", "more than %d segments", MaxSegments)
		}
		pos := len(f.Segments) + 1
		els := strings.Split(raw, string(sep))
		if len(els) > MaxElements+1 {
			return nil, perr(pos, els[0][:min(len(els[0]), 3)], "more than %d elements", MaxElements)
		}
		if !validID(els[0]) {
			return nil, perr(pos, "segment", "segment %d has no valid segment id", pos)
		}
		f.Segments = append(f.Segments, Segment{ID: els[0], Pos: pos, Elements: els})
	}
	thSeg := &f.Segments[0]
	f.Version = thSeg.El(1)
	if !Versions[f.Version] {
		return nil, perr(1, "TH01", "the version must be 4.2A or 4.2B")
	}
	f.ControlNumber = thSeg.El(2)
	if f.ControlNumber == "" {
		return nil, perr(1, "TH02", "the transaction control number is required")
	}
	last := &f.Segments[len(f.Segments)-1]
	if last.ID != "TT" {
		return nil, perr(last.Pos, "TT", "the file does not end with a TT trailer")
	}
	if last.El(1) != f.ControlNumber {
		return nil, perr(last.Pos, "TT01", "does not match TH02")
	}
	count, err := strconv.Atoi(last.El(2))
	if err != nil || !digits(last.El(2)) {
		return nil, perr(last.Pos, "TT02", "must be the number of segments")
	}
	if count != len(f.Segments) {
		return nil, perr(last.Pos, "TT02", "counts %d segments, the file has %d", count, len(f.Segments))
	}
	for _, s := range f.Segments[1 : len(f.Segments)-1] {
		if s.ID == "TH" || s.ID == "TT" {
			return nil, perr(s.Pos, s.ID, "a second %s segment", s.ID)
		}
	}
	return f, nil
}

func validID(id string) bool {
	if len(id) < 2 || len(id) > 3 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !(id[i] >= 'A' && id[i] <= 'Z') {
			return false
		}
	}
	return true
}

func digits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
