// Package movement is the model of an inventory movement: strict decoding,
// validation that reports every field error at once, the canonical encoding
// that is stored and sent to central, the deterministic key and the payload
// digest.
//
// Its promise: two submissions of the same movement (the same fields, in any
// order or spacing) have the same key and the same digest; the same
// movement_id with different content has the same key and a different digest;
// and no error text produced here contains a field's value, so nothing a
// movement carries (prescription or patient references in particular) can
// leak into logs or error responses (DESIGN P6).
package movement

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
)

// Movement types.
const (
	TypeDispense    = "dispense"
	TypeReceive     = "receive"
	TypeReturn      = "return"
	TypeWaste       = "waste"
	TypeTransferIn  = "transfer_in"
	TypeTransferOut = "transfer_out"
	// TypeAdjustIn and TypeAdjustOut correct the book up and down; each
	// carries a Reason.
	TypeAdjustIn  = "adjust_in"
	TypeAdjustOut = "adjust_out"
	// TypeAdjust is the adjustment of agents and clients from before
	// adjustments went both ways: it adds to stock, as TypeAdjustIn, and
	// is stored as sent so that its records keep their digests.
	TypeAdjust = "adjust"
	// TypeCount is a physical count: Quantity is the counted on-hand of
	// the NDC (zero allowed), CountKind and CountMethod say which count.
	// It changes nothing in the book; head office compares the two.
	TypeCount = "count"
)

// Reasons of an adjustment (and of waste, where given).
const (
	ReasonCountCorrection = "count_correction"
	ReasonDamaged         = "damaged"
	ReasonExpired         = "expired"
	ReasonTheft           = "theft"
	ReasonLoss            = "loss"
	ReasonOther           = "other"
)

// Kinds of count: DEA's biennial inventory (21 CFR 1304.11(c)), a
// quarterly reconciliation count (California, 16 CCR 1715.65), or a
// cycle count of some NDCs.
const (
	CountBiennial  = "biennial"
	CountQuarterly = "quarterly"
	CountCycle     = "cycle"
)

// Methods of count (21 CFR 1304.11(e)(1)(iii)): an exact count, required
// for Schedule I and II, or an estimate, allowed for III to V (unless a
// container holds more than 1,000 units, which the agent cannot see).
const (
	CountExact     = "exact"
	CountEstimated = "estimated"
)

// Class is the retry class of a movement.
type Class uint8

// Classes. Controlled substances get a larger retry budget.
const (
	Ordinary Class = iota
	Controlled
)

// Classes lists every class, in counter order.
var Classes = []Class{Ordinary, Controlled}

func (c Class) String() string {
	if c == Controlled {
		return "controlled"
	}
	return "ordinary"
}

// Movement is one inventory movement as submitted by the store's software.
// Field order here is the canonical field order.
type Movement struct {
	MovementID string `json:"movement_id"`
	StoreID    string `json:"store_id"`
	Type       string `json:"type"`
	NDC        string `json:"ndc"`
	// NDCAsSent is the NDC as the source sent it, when that was not the
	// canonical form NDC holds.
	NDCAsSent   string `json:"ndc_as_sent,omitempty"`
	Quantity    string `json:"quantity"`
	Unit        string `json:"unit"`
	OccurredAt  string `json:"occurred_at"`
	Schedule    string `json:"schedule,omitempty"`
	Reason      string `json:"reason,omitempty"`
	CountKind   string `json:"count_kind,omitempty"`
	CountMethod string `json:"count_method,omitempty"`
	Lot         string `json:"lot,omitempty"`
	Expires     string `json:"expires,omitempty"`
	RxRef       string `json:"rx_ref,omitempty"`
	DEAForm222  string `json:"dea_form_222,omitempty"`
	Note        string `json:"note,omitempty"`
}

// Class reports whether the movement is of a controlled substance.
func (m *Movement) Class() Class {
	if m.Schedule != "" {
		return Controlled
	}
	return Ordinary
}

// Key is the movement's key for a store: the first 128 bits of
// SHA-256(store_id 0x00 movement_id).
func Key(storeID, movementID string) [16]byte {
	var buf [256]byte
	b := append(buf[:0], storeID...)
	b = append(b, 0)
	b = append(b, movementID...)
	sum := sha256.Sum256(b)
	return [16]byte(sum[:16])
}

// KeyString is Key as 32 lower-case hex characters.
func KeyString(storeID, movementID string) string {
	k := Key(storeID, movementID)
	return hex.EncodeToString(k[:])
}

// ParseKey parses a key in its 32-hex-character form.
func ParseKey(s string) ([16]byte, bool) {
	var k [16]byte
	if len(s) != 32 || strings.ToLower(s) != s {
		return k, false
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, false
	}
	return k, true
}

// MaxCanonical bounds the canonical encoding of any valid movement: its
// fields are bounded (Validate), so the encoding is far smaller; a reader
// of central's archive (head office's sink) refuses a payload above it
// without decoding it. TestMaxCanonical builds the largest encoding.
const MaxCanonical = 64 << 10

// Canonical is the stored and published encoding of a valid movement: JSON
// with fields in a fixed order, optional fields omitted when empty, no
// insignificant white space. Validate normalizes the fields first, so
// equivalent submissions encode identically.
func (m *Movement) Canonical() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		// A struct of strings always marshals.
		panic("movement: canonical encoding: " + err.Error())
	}
	return b
}

// Digest is the SHA-256 of a canonical encoding.
func Digest(canonical []byte) [32]byte {
	return sha256.Sum256(canonical)
}

// Prepared is a decoded, validated movement in the form the queue stores.
type Prepared struct {
	MovementID string
	Key        [16]byte
	Digest     [32]byte
	Class      Class
	Schedule   string
	Payload    []byte // the canonical encoding
}

// KeyString is the key as 32 hex characters.
func (p *Prepared) KeyString() string { return hex.EncodeToString(p.Key[:]) }

// Prepare decodes and validates one movement for the agent of storeID at
// time now. On success the movement is in canonical form with its key and
// digest.
func Prepare(data []byte, storeID string, now time.Time) (Prepared, Errors) {
	m, es := Decode(data)
	if es != nil {
		return Prepared{}, es
	}
	if es := m.Validate(storeID, now); es != nil {
		return Prepared{}, es
	}
	return m.Prepared(storeID), nil
}

// Prepared is m, which Validate accepted for the agent of storeID, in the
// form the queue stores.
func (m *Movement) Prepared(storeID string) Prepared {
	c := m.Canonical()
	return Prepared{
		MovementID: m.MovementID,
		Key:        Key(storeID, m.MovementID),
		Digest:     Digest(c),
		Class:      m.Class(),
		Schedule:   m.Schedule,
		Payload:    c,
	}
}

// Equivalent reports whether digest is the digest of the movement whose
// canonical payload p holds, in another spelling of its NDC: with another
// ndc_as_sent or none, or in the form agents stored before NDCs were
// canonical (ndc as sent, no ndc_as_sent); p's payload may itself be in
// either form. The first spelling a store
// took is the one it keeps; a resubmission in another spelling is the
// same movement, a duplicate, not a conflict. The digest itself covers
// the whole payload, ndc_as_sent included, so what central holds and the
// store's log signs is exactly what was stored (P2, P9). Equivalent costs
// a decoding and up to seventeen digests: callers ask it only when the
// digests differ.
func (p *Prepared) Equivalent(digest [32]byte) bool {
	if digest == p.Digest {
		return true
	}
	m, es := Decode(p.Payload)
	if es != nil {
		return false
	}
	// A payload an earlier agent stored holds its NDC as sent.
	c, err := CanonicalNDC(m.NDC)
	if err != nil {
		return false
	}
	for _, s := range NDCSpellings(c) {
		v := *m
		v.NDC, v.NDCAsSent = c, s
		if s == c {
			v.NDCAsSent = ""
		}
		if Digest(v.Canonical()) == digest {
			return true
		}
		if len(s) != 10 {
			// Earlier agents took every spelling but a bare 10-digit
			// one as ndc, as it was sent.
			v.NDC, v.NDCAsSent = s, ""
			if Digest(v.Canonical()) == digest {
				return true
			}
		}
	}
	return false
}
