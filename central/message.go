package central

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of a movement message.
const (
	// HeaderMsgID carries MsgID(key, digest): within the duplicate window
	// central answers a resend with a duplicate acknowledgement.
	HeaderMsgID = jetstream.MsgIDHeader
	// HeaderExpectLast is always "0": the subject must hold no message yet,
	// so a resend after the window is refused, not stored twice.
	HeaderExpectLast = jetstream.ExpectedLastSubjSeqHeader
	// HeaderDigest is the hex SHA-256 of the canonical payload, which tells
	// a resend from a conflicting movement under the same key.
	HeaderDigest = "Rx-Digest"
	// HeaderStore is the store id.
	HeaderStore = "Rx-Store"
	// HeaderSeq is the per-store sequence assigned at enqueue, so central
	// can detect gaps.
	HeaderSeq = "Rx-Seq"
	// HeaderSchedule is the controlled-substance schedule, absent when the
	// movement is not controlled.
	HeaderSchedule = "Rx-Schedule"
	// HeaderEnqueuedAt is when the agent acknowledged the movement, RFC 3339
	// with nanoseconds, in UTC.
	HeaderEnqueuedAt = "Rx-Enqueued-At"
	// HeaderMigratedFrom names the stream a movement was copied from by
	// the move to a partitioned central (agent central migrate); agents
	// do not send it, but a store's credentials let it set any header.
	// Reconciliation skips such a copy when it also reads the archive of
	// the stream it came from and that holds its original.
	HeaderMigratedFrom = "Rx-Migrated-From"
	// HeaderFile is the identity of the store's data file that gave the
	// sequence (a UUID): a store's sequences are numbered per store, and
	// the file tells a replaced or restored PC from a reused sequence.
	HeaderFile = "Rx-File"
	// HeaderFilePrev names the file this one continues after, on every
	// movement of a file that replaced another (a new PC) or is a restored
	// copy of one; absent otherwise.
	HeaderFilePrev = "Rx-File-Prev"
	// HeaderFileBase is the highest sequence central held for the store
	// when the file continued after HeaderFilePrev: the file's own
	// sequences start above it.
	HeaderFileBase = "Rx-File-Base"
	// HeaderFileOrigin says why the file continues after another:
	// "replaced" (a new file) or "restored" (an older copy).
	HeaderFileOrigin = "Rx-File-Origin"
)

// Headers of JetStream's atomic batch publish, which the stream allows for
// backlog drains (the protocol of orbit.go's jetstreamext.PublishMsgBatch).
const (
	HeaderBatchID     = "Nats-Batch-Id"
	HeaderBatchSeq    = "Nats-Batch-Sequence"
	HeaderBatchCommit = "Nats-Batch-Commit"
)

// MsgID is the Nats-Msg-Id of a movement: its key, a dash and the first
// 128 bits of its digest in hex. Central's duplicate window spans the whole
// stream, every store's subjects, so an id that another store could guess
// would let it pre-empt this store's publish: central would answer that
// publish "duplicate" and store nothing. The key alone is guessable (it is
// derived from the store id and the movement id); the digest needs the
// payload, which only the store has.
func MsgID(key, digest string) string {
	if len(digest) > 32 {
		digest = digest[:32]
	}
	return key + "-" + digest
}

// Message is one movement as an agent publishes it.
type Message struct {
	Store      string
	Key        string    // the movement key, 32 hex characters
	Digest     string    // hex SHA-256 of the canonical payload
	Seq        uint64    // per-store sequence assigned at enqueue
	Schedule   string    // empty when the movement is not controlled
	EnqueuedAt time.Time // when the agent acknowledged it
	Payload    []byte
	File       FileLineage // the data file that gave Seq
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

// FileLineageOf reads the file headers of a stored movement.
func FileLineageOf(h nats.Header) FileLineage {
	f := FileLineage{ID: h.Get(HeaderFile), Prev: h.Get(HeaderFilePrev), Origin: h.Get(HeaderFileOrigin)}
	f.Base, _ = strconv.ParseUint(h.Get(HeaderFileBase), 10, 64)
	return f
}

// Msg builds the NATS message of m: subject Subject(m.Store, m.Key), the
// movement headers, and the payload as data.
func (m Message) Msg() *nats.Msg {
	msg := nats.NewMsg(Subject(m.Store, m.Key))
	msg.Header.Set(HeaderMsgID, MsgID(m.Key, m.Digest))
	msg.Header.Set(HeaderExpectLast, "0")
	msg.Header.Set(HeaderDigest, m.Digest)
	msg.Header.Set(HeaderStore, m.Store)
	msg.Header.Set(HeaderSeq, strconv.FormatUint(m.Seq, 10))
	if m.Schedule != "" {
		msg.Header.Set(HeaderSchedule, m.Schedule)
	}
	msg.Header.Set(HeaderEnqueuedAt, m.EnqueuedAt.UTC().Format(time.RFC3339Nano))
	if m.File.ID != "" {
		msg.Header.Set(HeaderFile, m.File.ID)
	}
	if m.File.Continues() {
		if m.File.Prev != "" {
			msg.Header.Set(HeaderFilePrev, m.File.Prev)
		}
		msg.Header.Set(HeaderFileBase, strconv.FormatUint(m.File.Base, 10))
		msg.Header.Set(HeaderFileOrigin, m.File.Origin)
	}
	msg.Data = m.Payload
	return msg
}
