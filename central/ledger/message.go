package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// CheckpointPrefix starts the subject token under which a store publishes
// a checkpoint on its own movement subjects: "cp-<log>-<size>". A movement
// key is 32 hex digits, so the two never meet; every archive reader tells
// them apart with IsCheckpointToken.
const CheckpointPrefix = "cp-"

// CheckpointToken is the last subject token of a checkpoint's message.
func CheckpointToken(log string, size int64) string {
	return CheckpointPrefix + log + "-" + strconv.FormatInt(size, 10)
}

// IsCheckpointToken reports whether a movement subject's last token names
// a checkpoint rather than a movement.
func IsCheckpointToken(token string) bool { return strings.HasPrefix(token, CheckpointPrefix) }

// ParseCheckpointToken splits CheckpointToken's form.
func ParseCheckpointToken(token string) (log string, size int64, err error) {
	rest, ok := strings.CutPrefix(token, CheckpointPrefix)
	log, n, ok2 := strings.Cut(rest, "-")
	size, err = strconv.ParseInt(n, 10, 64)
	if !ok || !ok2 || !ValidLogID(log) || err != nil || size < 0 || strconv.FormatInt(size, 10) != n {
		return "", 0, errors.New("ledger: not a checkpoint token")
	}
	return log, size, nil
}

// MaxMessage bounds a checkpoint message's body.
const MaxMessage = 8 << 10

// Message is the body of a published checkpoint: the signed note, and the
// proof that its tree extends the log's previous published checkpoint of
// PrevSize leaves (0 and no proof for a log's first checkpoint).
type Message struct {
	Note     string         `json:"note"`
	PrevSize int64          `json:"prev_size"`
	Proof    tlog.TreeProof `json:"proof,omitempty"`
}

// Marshal encodes the message as JSON.
func (m Message) Marshal() ([]byte, error) { return json.Marshal(m) }

// ParseMessage decodes a message, refusing a body too large, unknown
// fields, a negative size or a proof longer than any tree needs.
func ParseMessage(b []byte) (Message, error) {
	var m Message
	if len(b) > MaxMessage {
		return m, fmt.Errorf("ledger: checkpoint message over %d bytes", MaxMessage)
	}
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return Message{}, errors.New("ledger: checkpoint message is not valid JSON of its form")
	}
	if d.More() || m.Note == "" || m.PrevSize < 0 || len(m.Proof) > 2*64 {
		return Message{}, errors.New("ledger: checkpoint message is not of its form")
	}
	return m, nil
}

// CheckpointMsgID is the Nats-Msg-Id of a published checkpoint: its token,
// a dash and the first 128 bits of the SHA-256 of the message body in hex.
// Central's duplicate window spans every store's subjects, and a log id is
// public once archived: an id of the token alone would let another store
// publish it first on its own subject and have central answer this
// store's publish "duplicate" while storing nothing. The body's hash needs
// the signed note, which only the store has before it publishes.
func CheckpointMsgID(token string, body []byte) string {
	sum := sha256.Sum256(body)
	return token + "-" + hex.EncodeToString(sum[:16])
}

// ParseCheckpointMsgID splits CheckpointMsgID's form into the log and size
// of its token. It also reads a bare CheckpointToken: a reader takes the
// log and size from the id and trusts nothing of it before the note's
// signature and text agree (the token's size has at most 19 digits, the
// hash 32, so the two forms never meet).
func ParseCheckpointMsgID(id string) (log string, size int64, err error) {
	if i := strings.LastIndexByte(id, '-'); i >= 0 && len(id)-i-1 == 32 && strings.Trim(id[i+1:], "0123456789abcdef") == "" {
		id = id[:i]
	}
	if log, size, err = ParseCheckpointToken(id); err != nil {
		return "", 0, errors.New("ledger: not a checkpoint message id")
	}
	return log, size, nil
}

// Why OpenMessage refuses a record; matched with errors.Is.
var (
	// ErrNotCheckpointID: the record's message id is not of
	// CheckpointMsgID's form.
	ErrNotCheckpointID = errors.New("ledger: the message id is not a checkpoint's")
	// ErrMalformed: the body is not a Message (ParseMessage).
	ErrMalformed = errors.New("ledger: the body is not a checkpoint message of its form")
	// ErrNotSigned: no known key of the record's store signed a checkpoint
	// of that store in the note (unsigned, signed by an unknown key or
	// another store's, a signature that does not verify, or not a note).
	ErrNotSigned = errors.New("ledger: the checkpoint is not signed by a known key of its store")
)

// Signed is a published checkpoint message whose note a known key of its
// store signed: what a reader may select among and compare.
type Signed struct {
	Checkpoint
	// Note is the note, with every signature that verified (a witness's
	// countersignature as well, when its key was known).
	Note *note.Note
	// Text is the signed note as published.
	Text    string
	Message Message
	// Misnamed says the message id names another log or size than the
	// checkpoint: a signed checkpoint republished under another id. It is
	// still the checkpoint its signature says.
	Misnamed bool
}

// OpenMessage authenticates a record published on store's subjects
// under the message id id: its body must be a Message whose note a key of
// known, named for store, signed, and whose checkpoint is store's. Nothing
// of the id or of the body chooses anything before the signature
// verifies: the log and size are the signed note's, and an id naming
// others only marks the result Misnamed. The error is one of
// ErrNotCheckpointID, ErrMalformed and ErrNotSigned. The work is bounded
// by MaxMessage and the signatures the note carries.
func OpenMessage(store, id string, body []byte, known note.Verifiers) (Signed, error) {
	log, size, err := ParseCheckpointMsgID(id)
	if err != nil {
		return Signed{}, ErrNotCheckpointID
	}
	m, err := ParseMessage(body)
	if err != nil {
		return Signed{}, ErrMalformed
	}
	n, c, err := Open([]byte(m.Note), known)
	if err != nil {
		return Signed{}, ErrNotSigned
	}
	if c.Store != store {
		return Signed{}, ErrNotSigned
	}
	return Signed{Checkpoint: c, Note: n, Text: m.Note, Message: m, Misnamed: c.Log != log || c.Size != size}, nil
}
