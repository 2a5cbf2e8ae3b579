package movement

import (
	"errors"
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
	types = []string{TypeDispense, TypeReceive, TypeReturn, TypeAdjustIn, TypeAdjustOut, TypeAdjust,
		TypeWaste, TypeTransferIn, TypeTransferOut, TypeCount}
	units     = []string{"EA", "ML", "GM"}
	schedules = []string{"CII", "CIIN", "CIII", "CIIIN", "CIV", "CV"}
	// reasonsOf are the reasons each type may carry.
	reasonsOf = map[string][]string{
		TypeAdjustOut: {ReasonCountCorrection, ReasonDamaged, ReasonExpired, ReasonTheft, ReasonLoss, ReasonOther},
		TypeAdjustIn:  {ReasonCountCorrection, ReasonOther},
		TypeAdjust:    {ReasonCountCorrection, ReasonOther},
		TypeWaste:     {ReasonDamaged, ReasonExpired, ReasonOther},
	}
	countKinds   = []string{CountBiennial, CountQuarterly, CountCycle}
	countMethods = []string{CountExact, CountEstimated}
	earliest     = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Validate checks every field of m for the agent of store storeID at time
// now, and normalizes m in place so that its Canonical encoding is the same
// for equivalent submissions: store_id is filled in, the NDC is written in
// its canonical form (the spelling sent kept in ndc_as_sent when it was
// another), quantity is written without redundant zeros and a count's
// method defaults to exact. It returns every problem at once.
func (m *Movement) Validate(storeID string, now time.Time) Errors {
	var es Errors

	switch {
	case m.MovementID == "":
		es.addKind(ErrRequired, "movement_id", "is required")
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
	m.validateNDC(&es)

	switch q, ok := normalizeQuantity(m.Quantity); {
	case m.Quantity == "":
		es.addKind(ErrRequired, "quantity", "is required")
	case m.Type == TypeCount && q == "0":
		m.Quantity = q
	case !ok || q == "0" && m.Type != TypeCount:
		es.add("quantity", "must be a positive decimal number with at most 12 integer and 6 fraction digits (zero only for a count)")
	default:
		m.Quantity = q
	}

	oneOf(&es, "unit", m.Unit, units, true)

	if m.OccurredAt == "" {
		es.addKind(ErrRequired, "occurred_at", "is required")
	} else if t, err := time.Parse(time.RFC3339Nano, m.OccurredAt); err != nil {
		es.add("occurred_at", "must be an RFC 3339 time such as 2026-01-31T14:05:00-05:00")
	} else if t.Before(earliest) {
		es.add("occurred_at", "is before 2000-01-01")
	} else if t.After(now.Add(MaxFuture)) {
		es.add("occurred_at", "is more than %s ahead of the agent's clock", MaxFuture)
	}

	oneOf(&es, "schedule", m.Schedule, schedules, false)
	m.validateKind(&es)

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
			es.addKind(ErrRequired, name, "is required (one of %s)", strings.Join(allowed, ", "))
		}
		return
	}
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	es.addKind(ErrNotAllowed, name, "must be one of %s", strings.Join(allowed, ", "))
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

// validateNDC checks the NDC and puts it in its canonical form, keeping
// the spelling sent in ndc_as_sent when it was another. An ndc_as_sent the
// client gave (a relay passing on what it was sent) must spell the same
// NDC; one that is the canonical form itself says nothing and is dropped.
func (m *Movement) validateNDC(es *Errors) {
	c, err := CanonicalNDC(m.NDC)
	switch {
	case m.NDC == "":
		es.addKind(ErrRequired, "ndc", "is required")
		return
	case errors.Is(err, ErrNDCAmbiguous):
		es.add("ndc", "is a bare 10-digit NDC, which is ambiguous (4-4-2, 5-3-2 or 5-4-1): send it with its hyphens or as 11 digits (5-4-2), or list the product in the formulary")
		return
	case err != nil:
		es.add("ndc", "must be a 10-digit NDC in 4-4-2, 5-3-2 or 5-4-1 form or an 11-digit NDC (5-4-2, with or without hyphens)")
		return
	}
	if m.NDCAsSent == "" && m.NDC != c {
		m.NDCAsSent = m.NDC
	}
	m.NDC = c
	switch {
	case m.NDCAsSent == c:
		m.NDCAsSent = ""
	case m.NDCAsSent != "" && !spells(m.NDCAsSent, c):
		es.add("ndc_as_sent", "must be a spelling of the same NDC as ndc")
	}
}

// validateKind checks the fields that belong to some types only: an
// adjustment's or waste's reason, a count's kind and method.
func (m *Movement) validateKind(es *Errors) {
	if allowed, ok := reasonsOf[m.Type]; ok {
		required := m.Type == TypeAdjustIn || m.Type == TypeAdjustOut
		oneOf(es, "reason", m.Reason, allowed, required)
	} else if m.Reason != "" {
		es.add("reason", "applies only to adjust_in, adjust_out, adjust and waste")
	}
	if m.Type != TypeCount {
		if m.CountKind != "" || m.CountMethod != "" {
			es.add("count_kind", "count_kind and count_method apply only to a count")
		}
		return
	}
	oneOf(es, "count_kind", m.CountKind, countKinds, true)
	if m.CountMethod == "" {
		m.CountMethod = CountExact
	}
	oneOf(es, "count_method", m.CountMethod, countMethods, false)
	if m.CountMethod == CountEstimated && (m.Schedule == "CII" || m.Schedule == "CIIN") {
		es.add("count_method", "must be exact for schedule II (21 CFR 1304.11(e)(1)(iii))")
	}
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// normalizeQuantity accepts a decimal of no sign and no exponent, and
// returns it without leading zeros in the integer part or trailing zeros in
// the fraction; zero is "0".
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
	if intPart == "" {
		intPart = "0" // zero is "0": Validate allows it for a count only
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
