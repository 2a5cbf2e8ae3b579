package queue

import (
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

const recordVersion = 1

// maxDelaysKept bounds the delay history kept per record.
const maxDelaysKept = 32

var errCorrupt = errors.New("queue: corrupt record")

func (r *Record) marshal() []byte {
	b := make([]byte, 0, 128+len(r.Payload)+len(r.LastErrText))
	b = append(b, recordVersion)
	b = binary.BigEndian.AppendUint64(b, r.Seq)
	b = append(b, r.Key[:]...)
	b = append(b, r.Digest[:]...)
	b = append(b, byte(r.Class))
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
	b = appendString(b, string(r.Payload))
	return b
}

func unmarshalRecord(b []byte) (*Record, error) {
	d := decoder{b: b}
	if d.byte() != recordVersion {
		return nil, errCorrupt
	}
	r := new(Record)
	r.Seq = d.uint64()
	copy(r.Key[:], d.bytes(16))
	copy(r.Digest[:], d.bytes(32))
	r.Class = movement.Class(d.byte())
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
	r.Payload = []byte(d.string())
	if d.err {
		return nil, errCorrupt
	}
	return r, nil
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

// keyEntry is the value of the keys bucket: the state of one key.
type keyEntry struct {
	State     State
	Class     movement.Class
	Seq       uint64
	StreamSeq uint64    // central stream sequence, once synced
	At        time.Time // when it entered its current state
	Digest    [32]byte
}

const keyEntryLen = 1 + 1 + 8 + 8 + 8 + 32

func (e *keyEntry) marshal() []byte {
	b := make([]byte, 0, keyEntryLen)
	b = append(b, byte(e.State), byte(e.Class))
	b = binary.BigEndian.AppendUint64(b, e.Seq)
	b = binary.BigEndian.AppendUint64(b, e.StreamSeq)
	b = binary.BigEndian.AppendUint64(b, uint64(e.At.UnixNano()))
	return append(b, e.Digest[:]...)
}

func unmarshalKeyEntry(b []byte) (keyEntry, error) {
	var e keyEntry
	if len(b) != keyEntryLen {
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
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(max(t.UnixNano(), 0)))
	binary.BigEndian.PutUint64(b[8:], seq)
	return b
}

func parseDueKey(b []byte) (time.Time, uint64) {
	return time.Unix(0, int64(binary.BigEndian.Uint64(b))), binary.BigEndian.Uint64(b[8:])
}

// syncedKey orders the pruning index of synced keys by time.
func syncedKey(t time.Time, key [16]byte) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint64(b, uint64(t.UnixNano()))
	copy(b[8:], key[:])
	return b
}
