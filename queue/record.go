package queue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"time"

	"github.com/rxedge/agent/movement"
)

// Record is a movement held by the queue, pending or quarantined.
type Record struct {
	Seq        uint64
	Key        [16]byte
	Digest     [32]byte
	Class      movement.Class
	Schedule   string
	MovementID string
	Payload    []byte // canonical encoding

	EnqueuedAt time.Time
	NextAt     time.Time // when the movement is next due (pending only)
	Attempts   int       // movement-specific failed attempts so far

	// Failure history, kept for the quarantine's failure context.
	FirstFailure time.Time
	LastFailure  time.Time
	LastErrKind  string
	LastErrText  string
	Delays       []time.Duration // the retry delays that were waited

	// Set only on quarantined records.
	Quarantine *QuarantineInfo
}

// QuarantineInfo is why and when a movement was quarantined.
type QuarantineInfo struct {
	At           time.Time
	Reason       string // "permanent:<kind>" or "exhausted:<kind>"
	ConnState    string // the connection state when it was quarantined
	AgentVersion string
}

// KeyString is the record's key as 32 hex characters.
func (r *Record) KeyString() string { return hexKey(r.Key) }

// Record encodings. The first byte names the form; the key, digest and
// class are at fixed offsets in both, so lookups read them without
// decoding the rest.
const (
	recordV1      = 1 // schema 2: sequence, key, digest, class, ...; read by the migration only
	recordPending = 2 // in the pending bucket, whose key is the sequence: not stored again
	recordHeld    = 3 // in the quarantine bucket, keyed by key: the sequence follows the class
)

// Fixed offsets of recordPending and recordHeld.
const (
	recKeyAt    = 1
	recDigestAt = recKeyAt + 16
	recClassAt  = recDigestAt + 32
	recFixedLen = recClassAt + 1
)

// maxDelaysKept bounds the delay history kept per record.
const maxDelaysKept = 32

var errCorrupt = errors.New("queue: corrupt record")

// marshal encodes r for the pending bucket (held false: the sequence is
// the bucket key) or for the quarantine bucket (held true).
func (r *Record) marshal(held bool) []byte {
	b := make([]byte, 0, 96+len(r.Schedule)+len(r.MovementID)+len(r.Payload)+len(r.LastErrText))
	if held {
		b = append(b, recordHeld)
	} else {
		b = append(b, recordPending)
	}
	b = append(b, r.Key[:]...)
	b = append(b, r.Digest[:]...)
	b = append(b, byte(r.Class))
	if held {
		b = binary.AppendUvarint(b, r.Seq)
	}
	b = binary.AppendUvarint(b, uint64(r.Attempts))
	b = appendTime(b, r.EnqueuedAt)
	b = appendTime(b, r.NextAt)
	b = appendTime(b, r.FirstFailure)
	b = appendTime(b, r.LastFailure)
	b = appendString(b, r.Schedule)
	b = appendString(b, r.MovementID)
	b = appendString(b, r.LastErrKind)
	b = appendString(b, r.LastErrText)
	b = binary.AppendUvarint(b, uint64(len(r.Delays)))
	for _, d := range r.Delays {
		b = binary.AppendVarint(b, int64(d))
	}
	if q := r.Quarantine; q != nil {
		b = append(b, 1)
		b = appendTime(b, q.At)
		b = appendString(b, q.Reason)
		b = appendString(b, q.ConnState)
		b = appendString(b, q.AgentVersion)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Payload)))
	return append(b, r.Payload...)
}

// unmarshalRecord decodes a record stored under bucket key k (the
// sequence, for the pending bucket). The payload is the one copy made of
// the stored bytes.
func unmarshalRecord(k, b []byte) (*Record, error) {
	d := decoder{b: b}
	r := new(Record)
	switch d.byte() {
	case recordV1:
		r.Seq = d.uint64()
		copy(r.Key[:], d.bytes(16))
		copy(r.Digest[:], d.bytes(32))
		r.Class = movement.Class(d.byte())
	case recordPending:
		if len(k) != 8 {
			return nil, errCorrupt
		}
		r.Seq = binary.BigEndian.Uint64(k)
		copy(r.Key[:], d.bytes(16))
		copy(r.Digest[:], d.bytes(32))
		r.Class = movement.Class(d.byte())
	case recordHeld:
		copy(r.Key[:], d.bytes(16))
		copy(r.Digest[:], d.bytes(32))
		r.Class = movement.Class(d.byte())
		r.Seq = d.uvarint()
	default:
		return nil, errCorrupt
	}
	r.Attempts = int(d.uvarint())
	r.EnqueuedAt = d.time()
	r.NextAt = d.time()
	r.FirstFailure = d.time()
	r.LastFailure = d.time()
	r.Schedule = d.string()
	r.MovementID = d.string()
	r.LastErrKind = d.string()
	r.LastErrText = d.string()
	if n := d.uvarint(); n > 0 && n <= maxDelaysKept {
		r.Delays = make([]time.Duration, n)
		for i := range r.Delays {
			r.Delays[i] = time.Duration(d.varint())
		}
	} else if n > maxDelaysKept {
		return nil, errCorrupt
	}
	if d.byte() == 1 {
		q := new(QuarantineInfo)
		q.At = d.time()
		q.Reason = d.string()
		q.ConnState = d.string()
		q.AgentVersion = d.string()
		r.Quarantine = q
	}
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err = true
	} else {
		r.Payload = bytes.Clone(d.bytes(int(n)))
	}
	if d.err || len(d.b) != 0 {
		return nil, errCorrupt
	}
	return r, nil
}

// recordHead is what a lookup needs of a stored record, read without
// decoding it.
type recordHead struct {
	Key        [16]byte
	Digest     [32]byte
	Class      movement.Class
	EnqueuedAt time.Time
}

// peekRecord reads the head of a record of the current forms.
func peekRecord(b []byte) (recordHead, error) {
	var h recordHead
	if len(b) < recFixedLen || (b[0] != recordPending && b[0] != recordHeld) {
		return h, errCorrupt
	}
	copy(h.Key[:], b[recKeyAt:])
	copy(h.Digest[:], b[recDigestAt:])
	h.Class = movement.Class(b[recClassAt])
	d := decoder{b: b[recFixedLen:]}
	if b[0] == recordHeld {
		d.uvarint()
	}
	d.uvarint() // attempts
	h.EnqueuedAt = d.time()
	if d.err {
		return h, errCorrupt
	}
	return h, nil
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return binary.AppendVarint(b, 0)
	}
	return binary.AppendVarint(b, t.UnixNano())
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads the record encoding; any short read sets err.
type decoder struct {
	b   []byte
	err bool
}

func (d *decoder) bytes(n int) []byte {
	if d.err || n < 0 || len(d.b) < n {
		d.err = true
		return make([]byte, n&0xffff)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte { return d.bytes(1)[0] }

func (d *decoder) uint64() uint64 { return binary.BigEndian.Uint64(d.bytes(8)) }

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) time() time.Time {
	v := d.varint()
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err = true
		return ""
	}
	return string(d.bytes(int(n)))
}

// keyEntry is the value of the keys bucket. A pending or synced key
// holds only its sequence (entryShort): the pending bucket or the synced
// bucket, both keyed by sequence, hold the rest, so that acknowledging a
// movement never rewrites its key's entry. A quarantined, purged or
// redriven key holds its state and when it entered it (entryLong); a
// purged key, whose record is gone, also its digest. A redriven key is
// pending or, once acknowledged, synced, as for entryShort.
type keyEntry struct {
	Long   bool
	State  State // entryLong only
	Class  movement.Class
	Seq    uint64
	At     time.Time
	Digest [32]byte // purged only
}

// Key entry forms. Their first bytes are not states, so an entry of
// schema 2 (state first) is told from them.
const (
	entryShort = 0x10
	entryLong  = 0x11
)

func shortEntry(seq uint64) []byte {
	return binary.AppendUvarint([]byte{entryShort}, seq)
}

func (e *keyEntry) marshal() []byte {
	if !e.Long {
		return shortEntry(e.Seq)
	}
	b := make([]byte, 0, 3+10+10+32)
	b = append(b, entryLong, byte(e.State), byte(e.Class))
	b = binary.AppendUvarint(b, e.Seq)
	b = binary.AppendVarint(b, e.At.UnixNano())
	if e.State == Purged {
		b = append(b, e.Digest[:]...)
	}
	return b
}

func unmarshalKeyEntry(b []byte) (keyEntry, error) {
	var e keyEntry
	if len(b) == 0 {
		return e, errCorrupt
	}
	d := decoder{b: b[1:]}
	switch b[0] {
	case entryShort:
		e.Seq = d.uvarint()
	case entryLong:
		e.Long = true
		e.State = State(d.byte())
		e.Class = movement.Class(d.byte())
		e.Seq = d.uvarint()
		e.At = time.Unix(0, d.varint())
		if e.State == Purged {
			copy(e.Digest[:], d.bytes(32))
		}
		if e.State < Pending || e.State > Purged || e.State == Synced {
			return e, errCorrupt
		}
	default:
		return e, errCorrupt
	}
	if d.err || len(d.b) != 0 {
		return e, errCorrupt
	}
	return e, nil
}

// v1KeyEntry is the keys bucket's value in schema 2, read by the
// migration.
type v1KeyEntry struct {
	State     State
	Class     movement.Class
	Seq       uint64
	StreamSeq uint64
	At        time.Time
	Digest    [32]byte
}

const v1KeyEntryLen = 1 + 1 + 8 + 8 + 8 + 32

func unmarshalV1KeyEntry(b []byte) (v1KeyEntry, error) {
	var e v1KeyEntry
	if len(b) != v1KeyEntryLen || b[0] < byte(Pending) || b[0] > byte(Purged) {
		return e, errCorrupt
	}
	e.State = State(b[0])
	e.Class = movement.Class(b[1])
	e.Seq = binary.BigEndian.Uint64(b[2:])
	e.StreamSeq = binary.BigEndian.Uint64(b[10:])
	e.At = time.Unix(0, int64(binary.BigEndian.Uint64(b[18:])))
	copy(e.Digest[:], b[26:])
	return e, nil
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// dueKey orders the due index by time, then by sequence (FIFO).
func dueKey(t time.Time, seq uint64) []byte {
	var b [16]byte
	putDueKey(&b, t, seq)
	return b[:]
}

// putDueKey writes the due key of t and seq into b.
func putDueKey(b *[16]byte, t time.Time, seq uint64) {
	binary.BigEndian.PutUint64(b[:], uint64(max(t.UnixNano(), 0)))
	binary.BigEndian.PutUint64(b[8:], seq)
}

func parseDueKey(b []byte) (time.Time, uint64) {
	return time.Unix(0, int64(binary.BigEndian.Uint64(b))), binary.BigEndian.Uint64(b[8:])
}
