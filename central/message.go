package central

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of a movement message.
//
// Two forms are on the wire and in the archive. The compact form (this
// version's agents) carries Nats-Msg-Id with the whole digest,
// Nats-Expected-Last-Subject-Sequence, Rx-Seq, Rx-Enqueued-At in unix
// microseconds, Rx-File, and the lineage headers on a continued file's
// first movements only. The full form (older agents, and two years of the
// archive) also carries Rx-Digest, Rx-Store and Rx-Schedule, has only the
// first 128 bits of the digest in the message id, the enqueue time in
// RFC 3339 and the lineage headers on every movement of a continued file.
// Readers go through DigestOf, StoreAgrees, EnqueuedAtOf and FileLineageOf,
// which accept both.
const (
	// HeaderMsgID carries MsgID(key, digest): within the duplicate window
	// central answers a resend with a duplicate acknowledgement. It is
	// also where a reader finds the key (KeyOfMsgID) and, in the compact
	// form, the digest (DigestOf): an archive subject names only the store.
	HeaderMsgID = jetstream.MsgIDHeader
	// HeaderExpectLast is always "0": the subject must hold no message yet,
	// so a resend after the window is refused, not stored twice.
	HeaderExpectLast = jetstream.ExpectedLastSubjSeqHeader
	// HeaderDigest is the hex SHA-256 of the canonical payload, in the
	// full form only; the compact form has it in HeaderMsgID. Read it with
	// DigestOf.
	HeaderDigest = "Rx-Digest"
	// HeaderStore is the store id, in the full form only: the subject
	// names the store (the one a store's credentials let it publish to).
	// Read it with StoreAgrees.
	HeaderStore = "Rx-Store"
	// HeaderSeq is the per-store sequence assigned at enqueue, so central
	// can detect gaps.
	HeaderSeq = "Rx-Seq"
	// HeaderSchedule is the controlled-substance schedule, in the full
	// form only (no reader needs it: the payload has the schedule).
	HeaderSchedule = "Rx-Schedule"
	// HeaderEnqueuedAt is when the agent acknowledged the movement: unix
	// microseconds in the compact form, RFC 3339 with nanoseconds in UTC in
	// the full form. Read it with EnqueuedAtOf.
	HeaderEnqueuedAt = "Rx-Enqueued-At"
	// HeaderMigratedFrom names the stream a movement was copied from by
	// the move to a partitioned central (hq migrate); agents
	// do not send it, but a store's credentials let it set any header.
	// Reconciliation skips such a copy when it also reads the archive of
	// the stream it came from and that holds its original.
	HeaderMigratedFrom = "Rx-Migrated-From"
	// HeaderFile is the identity of the store's data file that gave the
	// sequence (a UUID): a store's sequences are numbered per store, and
	// the file tells a replaced or restored PC from a reused sequence.
	HeaderFile = "Rx-File"
	// HeaderFilePrev names the file this one continues after, on the
	// first movements of a file that replaced another (a new PC) or is a
	// restored copy of one (see Message.Lineage); absent otherwise. The
	// full form has it on every movement of such a file.
	HeaderFilePrev = "Rx-File-Prev"
	// HeaderFileBase is the highest sequence central held for the store
	// when the file continued after HeaderFilePrev: the file's own
	// sequences start above it.
	HeaderFileBase = "Rx-File-Base"
	// HeaderFileOrigin says why the file continues after another:
	// "replaced" (a new file) or "restored" (an older copy).
	HeaderFileOrigin = "Rx-File-Origin"
)

// LineageSpan is how many of a continued file's first sequences (above
// its base) carry the lineage headers (HeaderFilePrev, HeaderFileBase,
// HeaderFileOrigin); every atomic batch's first message carries them too
// (Message.Lineage). A reader takes a file's lineage from any of its
// movements that has it.
const LineageSpan = 1000

// Headers of JetStream's atomic batch publish, which the stream allows for
// backlog drains (the protocol of orbit.go's jetstreamext.PublishMsgBatch).
const (
	HeaderBatchID     = "Nats-Batch-Id"
	HeaderBatchSeq    = "Nats-Batch-Sequence"
	HeaderBatchCommit = "Nats-Batch-Commit"
)

// MsgID is the Nats-Msg-Id of a movement: its key, a dash and its
// digest in hex. Central's duplicate window spans the whole stream, every
// store's subjects, so an id that another store could guess would let it
// pre-empt this store's publish: central would answer that publish
// "duplicate" and store nothing. The key alone is guessable (it is derived
// from the store id and the movement id); the digest needs the payload,
// which only the store has. Older agents sent only the first 128 bits of
// the digest here, and the whole digest in HeaderDigest.
func MsgID(key, digest string) string {
	return key + "-" + digest
}

// digestLen is the length of a hex SHA-256.
const digestLen = 64

// DigestOf is the digest a stored movement's headers give: HeaderDigest
// when present (the full form), else the digest part of HeaderMsgID when
// it is a whole one (the compact form); "" when neither. The value is not
// checked to be hex: a reader checks what it needs.
func DigestOf(h nats.Header) string {
	if d := h.Get(HeaderDigest); d != "" {
		return d
	}
	_, d, ok := strings.Cut(h.Get(HeaderMsgID), "-")
	if !ok || len(d) != digestLen {
		return ""
	}
	return d
}

// StoreAgrees reports whether the headers h of a message on a subject of
// store agree with it: HeaderStore is absent (the compact form) or names
// store (the full form).
func StoreAgrees(h nats.Header, store string) bool {
	v, ok := h[HeaderStore]
	return !ok || len(v) > 0 && v[0] == store
}

// EnqueuedAtOf reads HeaderEnqueuedAt in either form; ok is false when it
// is missing or unreadable.
func EnqueuedAtOf(h nats.Header) (time.Time, bool) {
	v := h.Get(HeaderEnqueuedAt)
	if v == "" {
		return time.Time{}, false
	}
	if v[0] >= '0' && v[0] <= '9' && !strings.ContainsAny(v, "-:T") {
		us, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, false
		}
		return time.UnixMicro(us).UTC(), true
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// Message is one movement as an agent publishes it.
type Message struct {
	Store      string
	Key        string    // the movement key, 32 hex characters
	Digest     string    // hex SHA-256 of the canonical payload
	Seq        uint64    // per-store sequence assigned at enqueue
	EnqueuedAt time.Time // when the agent acknowledged it
	// Schedule is not sent: the payload holds the schedule.
	//
	// Deprecated: HeaderSchedule is of the full form only.
	Schedule string
	Payload  []byte
	File     FileLineage // the data file that gave Seq
	// Lineage sends File's lineage headers whatever Seq is (the first
	// message of an atomic batch); they go on the file's first
	// LineageSpan sequences anyway.
	Lineage bool
}

// FileLineage is what a movement says of the data file that gave its
// sequence.
type FileLineage struct {
	ID     string // HeaderFile; empty for files older than identities
	Prev   string // HeaderFilePrev
	Base   uint64 // HeaderFileBase
	Origin string // HeaderFileOrigin
}

// Continues reports whether the file continues after another one.
func (f FileLineage) Continues() bool { return f.Origin != "" && (f.Prev != "" || f.Base > 0) }

// FileLineageOf reads the file headers of a stored movement. The lineage
// (Prev, Base, Origin) is on some of a continued file's movements only.
func FileLineageOf(h nats.Header) FileLineage {
	f := FileLineage{ID: h.Get(HeaderFile), Prev: h.Get(HeaderFilePrev), Origin: h.Get(HeaderFileOrigin)}
	f.Base, _ = strconv.ParseUint(h.Get(HeaderFileBase), 10, 64)
	return f
}

// Msg builds the NATS message of m in the compact form: subject
// Subject(m.Store, m.Key), the movement headers, and the payload as data.
func (m Message) Msg() *nats.Msg {
	h := make(nats.Header, 8)
	h[HeaderMsgID] = []string{MsgID(m.Key, m.Digest)}
	h[HeaderExpectLast] = expectNone
	h[HeaderSeq] = []string{strconv.FormatUint(m.Seq, 10)}
	h[HeaderEnqueuedAt] = []string{strconv.FormatInt(m.EnqueuedAt.UnixMicro(), 10)}
	if m.File.ID != "" {
		h[HeaderFile] = []string{m.File.ID}
	}
	if m.File.Continues() && (m.Lineage || m.Seq <= m.File.Base+LineageSpan) {
		if m.File.Prev != "" {
			h[HeaderFilePrev] = []string{m.File.Prev}
		}
		h[HeaderFileBase] = []string{strconv.FormatUint(m.File.Base, 10)}
		h[HeaderFileOrigin] = []string{m.File.Origin}
	}
	return &nats.Msg{Subject: Subject(m.Store, m.Key), Header: h, Data: m.Payload}
}

// expectNone is HeaderExpectLast's one value. Header values are not
// changed after Msg builds them, so every message may share it.
var expectNone = []string{"0"}
