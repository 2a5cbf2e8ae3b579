package movement

import (
	"unicode/utf16"
	"unicode/utf8"
)

// decodeFast reads the common case in one pass over the input: a single
// object whose members are each a known field, named once, holding a
// string (or, for quantity, a number), with nothing but white space
// around it. It returns nil for every other input, well-formed or not,
// without saying why: Decode then reads the input token by token, which
// reports each problem in the words it always has. decodeFast must never
// accept what decodeTokens refuses, nor read a value differently; it may
// hand over anything it is unsure of.
//
// The input is copied once into a string and the fields are slices of
// it; only a string with escapes needs a buffer of its own.
func decodeFast(data []byte) *Movement {
	s := string(data)
	i := skipSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return nil
	}
	m := new(Movement)
	var seen uint32
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return end(s, i+1, m)
	}
	for {
		if i == len(s) || s[i] != '"' {
			return nil
		}
		name, next, ok := plainString(s, i+1)
		if !ok {
			return nil // escapes or bytes beyond ASCII: no known name has them
		}
		dst, n, num := m.member(name)
		if dst == nil {
			return nil // unknown
		}
		bit := uint32(1) << n
		if seen&bit != 0 {
			return nil // repeated
		}
		seen |= bit
		i = skipSpace(s, next)
		if i == len(s) || s[i] != ':' {
			return nil
		}
		i = skipSpace(s, i+1)
		if i == len(s) {
			return nil
		}
		switch c := s[i]; {
		case c == '"':
			v, next, ok := stringAt(s, i+1)
			if !ok {
				return nil
			}
			*dst, i = v, next
		case num && (c == '-' || '0' <= c && c <= '9'):
			next := numberEnd(s, i)
			if next < 0 {
				return nil
			}
			*dst, i = s[i:next], next
		default:
			return nil // of the wrong type
		}
		i = skipSpace(s, i)
		if i == len(s) {
			return nil
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return end(s, i+1, m)
		default:
			return nil
		}
	}
}

// end is m when only white space follows the object's closing brace at
// s[:i].
func end(s string, i int, m *Movement) *Movement {
	if skipSpace(s, i) != len(s) {
		return nil
	}
	return m
}

// member is where the field called name is kept, its number (for the
// check of repeats) and whether it may be given as a JSON number; dst is
// nil for a name that is no field. The names are those of the
// Movement's JSON tags.
func (m *Movement) member(name string) (dst *string, n uint, num bool) {
	switch name {
	case "movement_id":
		return &m.MovementID, 0, false
	case "store_id":
		return &m.StoreID, 1, false
	case "type":
		return &m.Type, 2, false
	case "ndc":
		return &m.NDC, 3, false
	case "ndc_as_sent":
		return &m.NDCAsSent, 13, false
	case "reason":
		return &m.Reason, 14, false
	case "count_kind":
		return &m.CountKind, 15, false
	case "count_method":
		return &m.CountMethod, 16, false
	case "quantity":
		return &m.Quantity, 4, true
	case "unit":
		return &m.Unit, 5, false
	case "occurred_at":
		return &m.OccurredAt, 6, false
	case "schedule":
		return &m.Schedule, 7, false
	case "lot":
		return &m.Lot, 8, false
	case "expires":
		return &m.Expires, 9, false
	case "rx_ref":
		return &m.RxRef, 10, false
	case "dea_form_222":
		return &m.DEAForm222, 11, false
	case "note":
		return &m.Note, 12, false
	}
	return nil, 0, false
}

// skipSpace is the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// plainString reads a string whose content starts at s[i] and holds only
// printable ASCII without escapes: its content and the index after its
// closing quote. ok is false for any other string.
func plainString(s string, i int) (v string, next int, ok bool) {
	for j := i; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return s[i:j], j + 1, true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return "", 0, false
		}
	}
	return "", 0, false
}

// stringAt reads a JSON string whose content starts at s[i], as
// encoding/json decodes it into a Go string: its value and the index after
// its closing quote. ok is false for a string encoding/json would refuse
// and, to keep this reader small, for one holding invalid UTF-8 (which
// encoding/json would replace); the caller hands those over.
func stringAt(s string, i int) (v string, next int, ok bool) {
	j := i
	ascii := true
	for ; j < len(s); j++ {
		c := s[j]
		if c == '"' {
			break
		}
		if c == '\\' {
			return unquote(s, i)
		}
		if c < 0x20 {
			return "", 0, false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	if j == len(s) {
		return "", 0, false
	}
	v = s[i:j]
	if !ascii && !utf8.ValidString(v) {
		return "", 0, false
	}
	return v, j + 1, true
}

// unquote is stringAt for a string with escapes. Its rules are those of
// encoding/json: the escapes of RFC 8259, and \u escapes of a lone or
// unpaired UTF-16 surrogate read as U+FFFD.
func unquote(s string, i int) (v string, next int, ok bool) {
	b := make([]byte, 0, 64)
	for j := i; j < len(s); {
		c := s[j]
		switch {
		case c == '"':
			if !utf8.Valid(b) {
				return "", 0, false
			}
			return string(b), j + 1, true
		case c < 0x20:
			return "", 0, false
		case c != '\\':
			b = append(b, c)
			j++
			continue
		}
		if j+1 == len(s) {
			return "", 0, false
		}
		switch e := s[j+1]; e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r := hex4(s, j+2)
			if r < 0 {
				return "", 0, false
			}
			j += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if j+1 < len(s) && s[j] == '\\' && s[j+1] == 'u' {
					r2 = hex4(s, j+2)
				}
				if p := utf16.DecodeRune(r, r2); p != utf8.RuneError {
					r = p
					j += 6
				} else {
					r = utf8.RuneError
				}
			}
			b = utf8.AppendRune(b, r)
			continue
		default:
			return "", 0, false
		}
		j += 2
	}
	return "", 0, false
}

// hex4 is the value of the four hexadecimal digits at s[i:], or -1.
func hex4(s string, i int) rune {
	if i+4 > len(s) {
		return -1
	}
	var r rune
	for k := i; k < i+4; k++ {
		c := s[k]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// numberEnd is the index after the JSON number that starts at s[i], or -1
// when none does.
func numberEnd(s string, i int) int {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i == len(s):
		return -1
	case s[i] == '0':
		i++
	case '1' <= s[i] && s[i] <= '9':
		i = digitsEnd(s, i+1)
	default:
		return -1
	}
	if i < len(s) && s[i] == '.' {
		j := digitsEnd(s, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digitsEnd(s, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digitsEnd(s string, i int) int {
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}
