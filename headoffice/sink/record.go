package sink

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
)

// Row is one archive message as the sink writes it: a movement, or, when
// Reject is set, a message that is not one.
type Row struct {
	Stream     string
	StreamSeq  uint64
	ArchivedAt time.Time
	Store      string
	// Reject names what is wrong (a header or field, never a value); the
	// fields below it are then unset.
	Reject string
	// Checkpoint marks a store's published checkpoint (central/ledger):
	// not a movement, so neither a row nor a reject; the position moves
	// past it. The fields below it are unset.
	Checkpoint bool

	Key, Digest string
	Seq         uint64
	EnqueuedAt  time.Time // zero when the header is missing
	Payload     []byte
	M           payload
	OccurredAt  time.Time
}

// payload is a movement's canonical encoding, the wire form agents
// publish: the fields of the movement model, which this package reads
// without linking the store side.
type payload struct {
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

// Limits of what the sink accepts of one payload.
const (
	// MaxPayload bounds a payload: the agent's canonical encodings are far
	// smaller, so anything larger is a reject, not a row.
	MaxPayload = 64 << 10
)

var (
	storeID  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`) // the agent's store-id pattern
	hex32    = regexp.MustCompile(`^[0-9a-f]{32}$`)
	hex64    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	decimal  = regexp.MustCompile(`^[0-9]{1,18}(\.[0-9]{1,6})?$`)
	types    = map[string]bool{"dispense": true, "receive": true, "return": true, "adjust": true, "waste": true, "transfer_in": true, "transfer_out": true}
	units    = map[string]bool{"EA": true, "ML": true, "GM": true}
	schedule = map[string]bool{"": true, "CII": true, "CIIN": true, "CIII": true, "CIIIN": true, "CIV": true, "CV": true}
)

// parseRow reads an archive message, its headers in either form (see
// central's headers). Any message becomes a Row: one that
// is not a well-formed movement of its subject's store becomes a reject,
// so the position can move past it and head office sees it.
func parseRow(stream string, streamSeq uint64, archivedAt time.Time, subject string, h map[string][]string, data []byte) Row {
	r := Row{Stream: stream, StreamSeq: streamSeq, ArchivedAt: archivedAt.UTC()}
	store, ok := strings.CutPrefix(subject, central.ArchivePrefix)
	if !ok || !storeID.MatchString(store) {
		r.Store, r.Reject = "", "subject"
		return r
	}
	r.Store = store
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if ledger.IsCheckpointToken(get(central.HeaderMsgID)) {
		r.Checkpoint = true
		return r
	}
	if !central.StoreAgrees(h, store) {
		r.Reject = "header " + central.HeaderStore
		return r
	}
	seq, err := strconv.ParseUint(get(central.HeaderSeq), 10, 63)
	if err != nil || seq == 0 {
		r.Reject = "header " + central.HeaderSeq
		return r
	}
	key := central.KeyOfMsgID(get(central.HeaderMsgID))
	if !hex32.MatchString(key) {
		r.Reject = "header " + central.HeaderMsgID
		return r
	}
	digest := central.DigestOf(h)
	if !hex64.MatchString(digest) {
		r.Reject = "header " + central.HeaderDigest
		if _, full := h[central.HeaderDigest]; !full {
			r.Reject = "header " + central.HeaderMsgID
		}
		return r
	}
	if len(data) > MaxPayload {
		r.Reject = "payload size"
		return r
	}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		r.Reject = "payload encoding"
		return r
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != digest {
		r.Reject = "payload digest"
		return r
	}
	var p payload
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || dec.More() {
		r.Reject = "payload json"
		return r
	}
	if field := p.invalid(store); field != "" {
		r.Reject = "payload " + field
		return r
	}
	at, _ := time.Parse(time.RFC3339Nano, p.OccurredAt)
	k := sha256.New()
	k.Write([]byte(store))
	k.Write([]byte{0})
	k.Write([]byte(p.MovementID))
	if hex.EncodeToString(k.Sum(nil)[:16]) != key {
		r.Reject = "payload movement_id"
		return r
	}
	r.Key, r.Digest, r.Seq, r.Payload, r.M, r.OccurredAt = key, digest, seq, data, p, at.UTC()
	if t, ok := central.EnqueuedAtOf(h); ok {
		r.EnqueuedAt = t.UTC()
	}
	return r
}

// Field limits: the agent's, with room. A longer field is a reject, never
// a row: an index entry past PostgreSQL's limit would stop the sink at
// that message for good.
const (
	maxIDLen   = 128
	maxNDCLen  = 16
	maxLotLen  = 64
	maxRefLen  = 128
	maxExpLen  = 16
	max222Len  = 20
	maxNoteLen = 1024
)

// invalid names the first field the sink cannot store, or "".
func (p *payload) invalid(store string) string {
	long := func(s string, n int) bool { return utf8.RuneCountInString(s) > n }
	switch {
	case p.MovementID == "" || !printable(p.MovementID) || long(p.MovementID, maxIDLen):
		return "movement_id"
	case p.StoreID != store:
		return "store_id"
	case !types[p.Type]:
		return "type"
	case p.NDC == "" || !printable(p.NDC) || long(p.NDC, maxNDCLen):
		return "ndc"
	case !decimal.MatchString(p.Quantity) || strings.Trim(p.Quantity, "0.") == "":
		return "quantity"
	case !units[p.Unit]:
		return "unit"
	case !schedule[p.Schedule]:
		return "schedule"
	case !printable(p.Lot) || long(p.Lot, maxLotLen):
		return "lot"
	case !printable(p.Expires) || long(p.Expires, maxExpLen):
		return "expires"
	case !printable(p.RxRef) || long(p.RxRef, maxRefLen):
		return "rx_ref"
	case !printable(p.DEAForm222) || long(p.DEAForm222, max222Len):
		return "dea_form_222"
	case strings.ContainsRune(p.Note, 0) || long(p.Note, maxNoteLen):
		return "note"
	}
	if _, err := time.Parse(time.RFC3339Nano, p.OccurredAt); err != nil {
		return "occurred_at"
	}
	return ""
}

// printable reports whether s has no control characters (PostgreSQL text
// refuses NUL; the others have no place in these fields).
func printable(s string) bool {
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
