package movement

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// FieldError is one problem with one field of one movement. Msg never
// contains the field's value.
type FieldError struct {
	Field string `json:"field"`
	Msg   string `json:"error"`
	// Kind is what sort of problem it is, for a caller that answers in
	// codes (HL7's table 0357) to branch on with errors.Is: ErrRequired,
	// ErrNotAllowed, or another package's; nil for any other problem. It
	// is not part of the JSON answer.
	Kind error `json:"-"`
}

// Kinds of field problems (FieldError.Kind).
var (
	// ErrRequired: a required field is missing.
	ErrRequired = errors.New("a required field is missing")
	// ErrNotAllowed: the value is not one of those the field allows.
	ErrNotAllowed = errors.New("the value is not one the field allows")
)

// Unwrap is the kind of problem, for errors.Is and errors.As.
func (e FieldError) Unwrap() error { return e.Kind }

func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Errors is every problem found in one movement, sorted by field.
type Errors []FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

func (es *Errors) add(field, format string, args ...any) {
	*es = append(*es, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// addKind is add for a problem of a kind (FieldError.Kind).
func (es *Errors) addKind(kind error, field, format string, args ...any) {
	*es = append(*es, FieldError{Field: field, Msg: fmt.Sprintf(format, args...), Kind: kind})
}

// field describes how one JSON member is decoded.
type field struct {
	set func(m *Movement, v string)
	num bool // a JSON number is accepted as well as a string
}

var fields = map[string]field{
	"movement_id":  {set: func(m *Movement, v string) { m.MovementID = v }},
	"store_id":     {set: func(m *Movement, v string) { m.StoreID = v }},
	"type":         {set: func(m *Movement, v string) { m.Type = v }},
	"ndc":          {set: func(m *Movement, v string) { m.NDC = v }},
	"ndc_as_sent":  {set: func(m *Movement, v string) { m.NDCAsSent = v }},
	"quantity":     {set: func(m *Movement, v string) { m.Quantity = v }, num: true},
	"unit":         {set: func(m *Movement, v string) { m.Unit = v }},
	"occurred_at":  {set: func(m *Movement, v string) { m.OccurredAt = v }},
	"schedule":     {set: func(m *Movement, v string) { m.Schedule = v }},
	"reason":       {set: func(m *Movement, v string) { m.Reason = v }},
	"count_kind":   {set: func(m *Movement, v string) { m.CountKind = v }},
	"count_method": {set: func(m *Movement, v string) { m.CountMethod = v }},
	"lot":          {set: func(m *Movement, v string) { m.Lot = v }},
	"expires":      {set: func(m *Movement, v string) { m.Expires = v }},
	"rx_ref":       {set: func(m *Movement, v string) { m.RxRef = v }},
	"dea_form_222": {set: func(m *Movement, v string) { m.DEAForm222 = v }},
	"note":         {set: func(m *Movement, v string) { m.Note = v }},
}

// MaxMembers bounds the members of a movement object Decode reads: a
// movement has seventeen fields, so an object of more is none, and is
// refused when the count is passed, before its members are read and an
// error kept for each.
const MaxMembers = 32

// Decode parses one movement from a JSON object. It is strict: unknown
// fields, repeated fields, values of the wrong JSON type and trailing data
// are errors. Every problem is reported at once. Decode does not validate
// the values; see Validate.
//
// A well-formed movement is read in one pass (decodeFast); anything else
// is read again token by token (decodeTokens), which finds and words every
// problem, up to the first MaxMembers members. The two agree on every input they both accept: the
// differential fuzz test holds them to it.
func Decode(data []byte) (*Movement, Errors) {
	if m := decodeFast(data); m != nil {
		return m, nil
	}
	return decodeTokens(data)
}

// decodeTokens is Decode for any input: the standard library's tokenizer
// finds syntax errors and their position, and each member is checked in
// turn so that every problem is reported.
func decodeTokens(data []byte) (*Movement, Errors) {
	var es Errors
	m := new(Movement)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		es.add("", "not valid JSON: %s", syntaxProblem(err))
		return nil, es
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		es.add("", "must be a JSON object")
		return nil, es
	}
	seen := make(map[string]bool)
	for members := 1; dec.More(); members++ {
		if members > MaxMembers {
			es.add("", "has more than %d members: a movement has at most %d fields", MaxMembers, len(fields))
			sortErrors(es)
			return nil, es
		}
		tok, err := dec.Token()
		if err != nil {
			es.add("", "not valid JSON: %s", syntaxProblem(err))
			return nil, es
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			es.add("", "not valid JSON: %s", syntaxProblem(err))
			return nil, es
		}
		f, known := fields[name]
		switch {
		case !known:
			es.add(safeName(name), "unknown field")
			continue
		case seen[name]:
			es.add(name, "appears more than once")
			continue
		}
		seen[name] = true
		v, ok := stringValue(raw, f.num)
		if !ok {
			if f.num {
				es.add(name, "must be a number or a string")
			} else {
				es.add(name, "must be a string")
			}
			continue
		}
		f.set(m, v)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		es.add("", "not valid JSON: %s", syntaxProblem(err))
		return nil, es
	}
	if _, err := dec.Token(); err != io.EOF {
		es.add("", "unexpected data after the object")
	}
	if len(es) > 0 {
		sortErrors(es)
		return nil, es
	}
	return m, nil
}

func stringValue(raw json.RawMessage, num bool) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch {
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false
		}
		return s, true
	case num && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
		return string(raw), true
	}
	return "", false
}

// safeName keeps an unknown field's name readable in an error without
// echoing arbitrarily long or binary input.
func safeName(name string) string {
	const max = 64
	var b strings.Builder
	for i, r := range name {
		if i >= max {
			b.WriteString("…")
			break
		}
		if r < 0x20 || r == 0x7f {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// syntaxProblem describes a JSON syntax error by position only: the
// standard library's messages quote the offending input.
func syntaxProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return "malformed input"
}

func sortErrors(es Errors) {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Field < es[j].Field })
}
