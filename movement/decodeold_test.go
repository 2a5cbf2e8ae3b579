package movement

// This file keeps, unchanged but for its names and the fields the model
// gained since, the token-by-token decoder that Decode replaced, as the
// reference the differential tests compare Decode against: the same inputs
// accepted, the same values, the same error text.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// oldField describes how one JSON member is decoded.
type oldField struct {
	set func(m *Movement, v string)
	num bool // a JSON number is accepted as well as a string
}

var oldFields = map[string]oldField{
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

// decodeOld parses one movement from a JSON object. It is strict: unknown
// oldFields, repeated oldFields, values of the wrong JSON type and trailing data
// are errors. Every problem is reported at once. decodeOld does not validate
// the values; see Validate.
func decodeOld(data []byte) (*Movement, Errors) {
	var es Errors
	m := new(Movement)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		es.add("", "not valid JSON: %s", oldSyntaxProblem(err))
		return nil, es
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		es.add("", "must be a JSON object")
		return nil, es
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			es.add("", "not valid JSON: %s", oldSyntaxProblem(err))
			return nil, es
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			es.add("", "not valid JSON: %s", oldSyntaxProblem(err))
			return nil, es
		}
		f, known := oldFields[name]
		switch {
		case !known:
			es.add(oldSafeName(name), "unknown field")
			continue
		case seen[name]:
			es.add(name, "appears more than once")
			continue
		}
		seen[name] = true
		v, ok := oldStringValue(raw, f.num)
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
		es.add("", "not valid JSON: %s", oldSyntaxProblem(err))
		return nil, es
	}
	if _, err := dec.Token(); err != io.EOF {
		es.add("", "unexpected data after the object")
	}
	if len(es) > 0 {
		oldSortErrors(es)
		return nil, es
	}
	return m, nil
}

func oldStringValue(raw json.RawMessage, num bool) (string, bool) {
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

// oldSafeName keeps an unknown field's name readable in an error without
// echoing arbitrarily long or binary input.
func oldSafeName(name string) string {
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

// oldSyntaxProblem describes a JSON syntax error by position only: the
// standard library's messages quote the offending input.
func oldSyntaxProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return "malformed input"
}

func oldSortErrors(es Errors) {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Field < es[j].Field })
}
