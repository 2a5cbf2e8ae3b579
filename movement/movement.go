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
	TypeAdjust      = "adjust"
	TypeWaste       = "waste"
	TypeTransferIn  = "transfer_in"
	TypeTransferOut = "transfer_out"
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
	Quantity   string `json:"quantity"`
	Unit       string `json:"unit"`
	OccurredAt string `json:"occurred_at"`
	Schedule   string `json:"schedule,omitempty"`
	Lot        string `json:"lot,omitempty"`
	Expires    string `json:"expires,omitempty"`
	RxRef      string `json:"rx_ref,omitempty"`
	DEAForm222 string `json:"dea_form_222,omitempty"`
	Note       string `json:"note,omitempty"`
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
	c := m.Canonical()
	return Prepared{
		MovementID: m.MovementID,
		Key:        Key(storeID, m.MovementID),
		Digest:     Digest(c),
		Class:      m.Class(),
		Schedule:   m.Schedule,
		Payload:    c,
	}, nil
}
