package lineage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/queue"
)

// Found is what a read of one of central's records found.
type Found string

// What a read found.
const (
	FoundNone       Found = "none"       // central holds nothing there
	FoundMovement   Found = "movement"   // a movement as the store sends it
	FoundCheckpoint Found = "checkpoint" // a checkpoint as the store publishes it
	FoundSummary    Found = "summary"    // the store's own fleet summary
	FoundSkipped    Found = "skipped"    // a record the store cannot take as its own: Claim.Skip says why
	FoundUnread     Found = "unread"     // the summary could not be read (Claim.Err): an older server configuration
)

// Where a claim was read.
const (
	WhereLast    = "last_movement" // the last message on the store's movement subjects
	WhereSummary = "summary"       // the store's key in the fleet view
)

// Why a record was skipped. Each is a record the store did not write as it
// writes its own, so it says nothing of the store's sequences.
const (
	// SkipReflected: the record carries the headers central adds to a
	// direct get's answer (Nats-Stream, Nats-Subject, Nats-Sequence,
	// Nats-Time-Stamp): a JetStream answer a user of the streams'
	// account aimed at the store's subject as a reply subject.
	SkipReflected = "reflected"
	// SkipStatus: a stored status answer (a status line, no content).
	SkipStatus = "status"
	// SkipUnreadable: headers central stored that cannot be parsed.
	SkipUnreadable = "unreadable"
	// SkipNoSeq: no Rx-Seq, or not exactly one decimal.
	SkipNoSeq = "no_seq"
	// SkipSeqRange: Rx-Seq (or a summary's highest_seq) above
	// queue.MaxSeq.
	SkipSeqRange = "seq_out_of_range"
	// SkipInconsistent: the subject, message id, digest, file identity or
	// checkpoint disagree with each other or with the store.
	SkipInconsistent = "inconsistent"
	// SkipNotOwn: a fleet summary that is not this store's.
	SkipNotOwn = "not_own"
	// SkipImplausible: a sequence ahead of the store's own summary by more
	// than MaxLead, which no store gives between two summaries (Decide).
	SkipImplausible = "seq_implausible"
)

// Claim is what one of central's records says of the store.
type Claim struct {
	Where string `json:"where"` // WhereLast or WhereSummary
	Found Found  `json:"found"`
	Skip  string `json:"skip,omitempty"` // why it was skipped (FoundSkipped)
	// Seq is the sequence the record says the store gave (Rx-Seq, or the
	// summary's highest_seq).
	Seq uint64 `json:"seq,omitempty"`
	// File is the data file the record names ("" when none).
	File string `json:"file,omitempty"`
	// Signed is true for a checkpoint whose signature verifies with the
	// store's own key: the store's own message, headers included.
	Signed bool `json:"signed,omitempty"`
	// Stream and StreamSeq say where central holds the record, for an
	// operator (nats stream get <stream> <seq>).
	Stream    string `json:"stream,omitempty"`
	StreamSeq uint64 `json:"stream_seq,omitempty"`
	// Err is why the summary could not be read (FoundUnread).
	Err string `json:"error,omitempty"`
}

// skip marks c skipped for why.
func (c Claim) skip(why string) Claim {
	c.Found, c.Skip, c.Seq, c.File, c.Signed = FoundSkipped, why, 0, "", false
	return c
}

// errNotFound is a direct get of a subject with no message.
var errNotFound = errors.New("lineage: no message")

// directGet asks central for the last message of a direct-get subject. An
// answer that carries central's headers is a stored record, whatever else
// it carries (a status line included): interpreting it is the caller's.
// One without them is central's own answer: "404" is no message, any
// other status an error of the read.
func directGet(ctx context.Context, nc *nats.Conn, subject string) (*nats.Msg, error) {
	resp, err := nc.RequestWithContext(ctx, subject, nil)
	if err != nil {
		return nil, err
	}
	if len(resp.Header.Values(jetstream.SequenceHeader)) > 0 {
		return resp, nil
	}
	switch st := resp.Header.Get("Status"); st {
	case "404":
		return nil, errNotFound
	case "":
		return resp, nil // no header central adds: Classify skips it as unreadable
	default:
		return nil, fmt.Errorf("status %s %s", st, resp.Header.Get("Description"))
	}
}

// stored reads the headers central adds to a stored record's direct-get
// answer (central.ReadStored: the last value of each), and says why the
// record must be skipped ("" when it need not be).
func stored(m *nats.Msg) (stream, subject string, seq uint64, skip string) {
	if m.Header == nil {
		return "", "", 0, SkipUnreadable
	}
	st, ok := central.ReadStored(m.Header)
	switch {
	case !ok:
		return "", "", 0, SkipUnreadable
	case st.Reflected:
		return st.Stream, st.Subject, st.Seq, SkipReflected
	case m.Header.Get("Status") != "":
		return st.Stream, st.Subject, st.Seq, SkipStatus
	}
	return st.Stream, st.Subject, st.Seq, ""
}

// fileIDPattern is a data file's identity as queue gives it: a version 4
// UUID in lower-case text form.
var fileIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// validFileID reports whether id is empty or a data file's identity: only
// such an id is written into the data file, its journal or the status.
func validFileID(id string) bool { return id == "" || fileIDPattern.MatchString(id) }

// one is the single value of header k ("" and false when it has none or
// several).
func one(h nats.Header, k string) (string, bool) {
	v := h.Values(k)
	if len(v) != 1 {
		return "", false
	}
	return v[0], true
}

// seqOf reads a record's single, canonical Rx-Seq.
func seqOf(h nats.Header) (uint64, string) {
	v, ok := one(h, central.HeaderSeq)
	seq, err := strconv.ParseUint(v, 10, 64)
	if !ok || err != nil || seq == 0 || strconv.FormatUint(seq, 10) != v {
		return 0, SkipNoSeq
	}
	if seq > queue.MaxSeq {
		return 0, SkipSeqRange
	}
	return seq, ""
}

// ClassifyLast interprets the last message on store's movement subjects,
// as a direct get answered it (nil when central holds none). key is the
// store's own checkpoint verifier key ("" when none): a checkpoint it
// verifies is the store's own message. Nothing in m is trusted before it
// is checked, and nothing unchecked is returned.
func ClassifyLast(m *nats.Msg, store, key string) Claim {
	c := Claim{Where: WhereLast, Found: FoundNone}
	if m == nil {
		return c
	}
	var subject, skip string
	c.Stream, subject, c.StreamSeq, skip = stored(m)
	if skip != "" {
		return c.skip(skip)
	}
	prefix, token, ok := cutLast(subject)
	if !ok || !strings.HasSuffix(prefix, "."+store) {
		return c.skip(SkipInconsistent)
	}
	seq, skip := seqOf(m.Header)
	if skip != "" {
		return c.skip(skip)
	}
	file, ok := one(m.Header, central.HeaderFile)
	if len(m.Header.Values(central.HeaderFile)) == 0 {
		file, ok = "", true // a movement from before files had identities
	}
	sum := sha256.Sum256(m.Data)
	if !ok || !validFileID(file) || !central.StoreAgrees(m.Header, store) || central.DigestOf(m.Header) != hex.EncodeToString(sum[:]) {
		return c.skip(SkipInconsistent)
	}
	c.Seq, c.File = seq, file
	if ledger.IsCheckpointToken(token) {
		return checkpointClaim(c, m, store, token, key)
	}
	if !isKey(token) || central.KeyOfMsgID(m.Header.Get(central.HeaderMsgID)) != token {
		return c.skip(SkipInconsistent)
	}
	c.Found = FoundMovement
	return c
}

// checkpointClaim checks a record under a checkpoint token: its message id,
// body and note agree with the token and the store, the note covers no
// sequence above the record's Rx-Seq, and, when key verifies the note's
// signature, the record is the store's own.
func checkpointClaim(c Claim, m *nats.Msg, store, token, key string) Claim {
	log, size, err := ledger.ParseCheckpointToken(token)
	if err != nil || m.Header.Get(central.HeaderMsgID) != ledger.CheckpointMsgID(token, m.Data) {
		return c.skip(SkipInconsistent)
	}
	body, err := ledger.ParseMessage(m.Data)
	if err != nil {
		return c.skip(SkipInconsistent)
	}
	cp, signed := openCheckpoint([]byte(body.Note), key)
	if cp == nil || cp.Store != store || cp.Log != log || cp.Size != size || size > 0 && (cp.First > c.Seq || uint64(size)-1 > c.Seq-cp.First) {
		return c.skip(SkipInconsistent)
	}
	c.Found, c.Signed = FoundCheckpoint, signed
	return c
}

// openCheckpoint reads a checkpoint's note, verified with key when it can
// be (signed true), else its text unverified; nil when it is not a
// checkpoint.
func openCheckpoint(msg []byte, key string) (*ledger.Checkpoint, bool) {
	if key != "" {
		if v, err := note.NewVerifier(key); err == nil {
			if _, cp, err := ledger.Open(msg, note.VerifierList(v)); err == nil {
				return &cp, true
			}
		}
	}
	_, err := note.Open(msg, note.VerifierList())
	var un *note.UnverifiedNoteError
	if !errors.As(err, &un) {
		return nil, false
	}
	cp, err := ledger.ParseCheckpoint(un.Note.Text)
	if err != nil {
		return nil, false
	}
	return &cp, false
}

// ClassifySummary interprets the store's key in the fleet view, as a
// direct get answered it (nil when central holds none).
func ClassifySummary(m *nats.Msg, store string) Claim {
	c := Claim{Where: WhereSummary, Found: FoundNone}
	if m == nil {
		return c
	}
	var subject, skip string
	c.Stream, subject, c.StreamSeq, skip = stored(m)
	if skip == SkipReflected && ownCopies(m.Header, central.FleetSubject(store)) {
		// The store's own summary copied onto its own key by a
		// reflection: every subject it was read from is the store's key,
		// so the content is what the store wrote.
		skip = ""
	}
	if skip != "" {
		return c.skip(skip)
	}
	if subject != central.FleetSubject(store) {
		return c.skip(SkipInconsistent)
	}
	var s command.Summary
	if len(m.Data) > central.MaxFleetValue || json.Unmarshal(m.Data, &s) != nil || s.StoreID != store {
		return c.skip(SkipNotOwn)
	}
	if s.HighestSeq > queue.MaxSeq {
		return c.skip(SkipSeqRange)
	}
	if !validFileID(s.FileID) {
		return c.skip(SkipInconsistent)
	}
	c.Found, c.Seq, c.File = FoundSummary, s.HighestSeq, s.FileID
	return c
}

// ownCopies reports whether every subject h says its record was read from
// is subject.
func ownCopies(h nats.Header, subject string) bool {
	for _, s := range h.Values(jetstream.SubjectHeader) {
		if s != subject {
			return false
		}
	}
	return h.Get("Status") == ""
}

// cutLast splits a subject at its last dot.
func cutLast(subject string) (prefix, token string, ok bool) {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 {
		return "", "", false
	}
	return subject[:i], subject[i+1:], true
}

// isKey reports whether token is a movement key: 32 lower-case hex digits.
func isKey(token string) bool {
	if len(token) != 32 {
		return false
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Read reads what central holds for store: the last message on its
// movement subjects and its fleet summary, each classified (key verifies
// the store's checkpoints; "" when there is none). The read of the last
// movement must succeed (no message is an answer); the summary is best
// effort (FoundUnread).
func Read(ctx context.Context, nc *nats.Conn, store, key string, timeout time.Duration) (last, summary Claim, err error) {
	mctx, cancel := context.WithTimeout(ctx, timeout)
	m, err := directGet(mctx, nc, central.LastMovementSubject(store))
	cancel()
	switch {
	case errors.Is(err, errNotFound):
		m = nil
	case err != nil:
		return Claim{}, Claim{}, fmt.Errorf("lineage: read the last message central stored for %s: %w", store, err)
	}
	last = ClassifyLast(m, store, key)
	sctx, cancel := context.WithTimeout(ctx, timeout)
	m, err = directGet(sctx, nc, central.FleetDirectGetSubject(store))
	cancel()
	switch {
	case errors.Is(err, errNotFound):
		summary = ClassifySummary(nil, store)
	case err != nil:
		summary = Claim{Where: WhereSummary, Found: FoundUnread, Err: err.Error()}
	default:
		summary = ClassifySummary(m, store)
	}
	return last, summary, nil
}
