package movement

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on field lengths, in characters.
const (
	maxIDLen   = 128
	maxLotLen  = 64
	maxRefLen  = 128
	maxNoteLen = 1024
	max222Len  = 20

	// MaxFuture is how far ahead of the agent's clock occurred_at may be.
	MaxFuture = 24 * time.Hour
)

var (
	types     = []string{TypeDispense, TypeReceive, TypeReturn, TypeAdjust, TypeWaste, TypeTransferIn, TypeTransferOut}
	units     = []string{"EA", "ML", "GM"}
	schedules = []string{"CII", "CIIN", "CIII", "CIIIN", "CIV", "CV"}
	// ndcForms are the accepted NDC shapes: digit-group lengths.
	ndcForms = [][]int{{4, 4, 2}, {5, 3, 2}, {5, 4, 1}, {5, 4, 2}, {11}}
	earliest = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Validate checks every field of m for the agent of store storeID at time
// now, and normalizes m in place so that its Canonical encoding is the same
// for equivalent submissions: store_id is filled in and quantity is written
// without redundant zeros. It returns every problem at once.
func (m *Movement) Validate(storeID string, now time.Time) Errors {
	var es Errors

	switch {
	case m.MovementID == "":
		es.add("movement_id", "is required")
	case utf8.RuneCountInString(m.MovementID) > maxIDLen:
		es.add("movement_id", "is longer than %d characters", maxIDLen)
	case !printable(m.MovementID, false) || strings.TrimSpace(m.MovementID) != m.MovementID:
		es.add("movement_id", "must be printable text without control characters or surrounding spaces")
	}

	switch {
	case m.StoreID == "":
		m.StoreID = storeID
	case m.StoreID != storeID:
		es.add("store_id", "does not match this agent's store (omit it, or send %s)", storeID)
	}

	oneOf(&es, "type", m.Type, types, true)

	if m.NDC == "" {
		es.add("ndc", "is required")
	} else if !validNDC(m.NDC) {
		es.add("ndc", "must be a 10-digit NDC in 4-4-2, 5-3-2 or 5-4-1 form or an 11-digit NDC (5-4-2, with or without hyphens)")
	}

	if m.Quantity == "" {
		es.add("quantity", "is required")
	} else if q, ok := normalizeQuantity(m.Quantity); !ok {
		es.add("quantity", "must be a positive decimal number with at most 12 integer and 6 fraction digits")
	} else {
		m.Quantity = q
	}

	oneOf(&es, "unit", m.Unit, units, true)

	if m.OccurredAt == "" {
		es.add("occurred_at", "is required")
	} else if t, err := time.Parse(time.RFC3339Nano, m.OccurredAt); err != nil {
		es.add("occurred_at", "must be an RFC 3339 time such as 2026-01-31T14:05:00-05:00")
	} else if t.Before(earliest) {
		es.add("occurred_at", "is before 2000-01-01")
	} else if t.After(now.Add(MaxFuture)) {
		es.add("occurred_at", "is more than %s ahead of the agent's clock", MaxFuture)
	}

	oneOf(&es, "schedule", m.Schedule, schedules, false)

	text(&es, "lot", m.Lot, maxLotLen, false)
	if m.Expires != "" && !validExpiry(m.Expires) {
		es.add("expires", "must be a date as YYYY-MM-DD or YYYY-MM")
	}
	text(&es, "rx_ref", m.RxRef, maxRefLen, false)
	if m.DEAForm222 != "" {
		switch {
		case !alnum(m.DEAForm222) || len(m.DEAForm222) > max222Len:
			es.add("dea_form_222", "must be 1 to %d letters or digits", max222Len)
		case m.Schedule != "CII" && m.Schedule != "CIIN":
			es.add("dea_form_222", "applies only to schedule CII or CIIN movements")
		}
	}
	text(&es, "note", m.Note, maxNoteLen, true)

	sortErrors(es)
	return es
}

func oneOf(es *Errors, name, v string, allowed []string, required bool) {
	if v == "" {
		if required {
			es.add(name, "is required (one of %s)", strings.Join(allowed, ", "))
		}
		return
	}
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	es.add(name, "must be one of %s", strings.Join(allowed, ", "))
}

func text(es *Errors, name, v string, max int, multiline bool) {
	switch {
	case v == "":
	case !utf8.ValidString(v):
		es.add(name, "must be valid UTF-8")
	case utf8.RuneCountInString(v) > max:
		es.add(name, "is longer than %d characters", max)
	case !printable(v, multiline):
		es.add(name, "must not contain control characters")
	}
}

func printable(s string, multiline bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if multiline && (r == '\n' || r == '\t') {
			continue
		}
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func alnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return s != ""
}

func validNDC(s string) bool {
	var groups [3]string
	n := strings.Count(s, "-") + 1
	if n > len(groups) {
		return false
	}
	rest := s
	for i := range n - 1 {
		groups[i], rest, _ = strings.Cut(rest, "-")
	}
	groups[n-1] = rest
	for _, form := range ndcForms {
		if len(form) != n {
			continue
		}
		ok := true
		for i, l := range form {
			if len(groups[i]) != l || !digits(groups[i]) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// normalizeQuantity accepts a positive decimal (no sign, no exponent) and
// returns it without leading zeros in the integer part or trailing zeros in
// the fraction.
func normalizeQuantity(s string) (string, bool) {
	intPart, frac, hasDot := strings.Cut(s, ".")
	if !digits(intPart) || hasDot && !digits(frac) {
		return "", false
	}
	intPart = strings.TrimLeft(intPart, "0")
	frac = strings.TrimRight(frac, "0")
	if len(intPart) > 12 || len(frac) > 6 {
		return "", false
	}
	if intPart == "" && frac == "" {
		return "", false // zero
	}
	if intPart == "" {
		intPart = "0"
	}
	if frac == "" {
		return intPart, true
	}
	return intPart + "." + frac, true
}

// validExpiry reports whether s is a date as YYYY-MM-DD or YYYY-MM. Each
// layout matches only strings of its own length, so the length picks the
// one to try.
func validExpiry(s string) bool {
	layout := "2006-01-02"
	if len(s) == len("2006-01") {
		layout = "2006-01"
	}
	_, err := time.Parse(layout, s)
	return err == nil
}
