package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

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
