package ledger

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// OriginPrefix starts every log's origin line: "rxedge.ledger/<store>/<log>".
const OriginPrefix = "rxedge.ledger/"

// logIDPattern is a log id: 16 lower-case hex digits, random.
var logIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// storePattern is central's store-id form (central.ValidStoreID, which
// this leaf package cannot import; that test keeps them equal).
var storePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// NewLogID returns a random log id.
func NewLogID(rand io.Reader) (string, error) {
	var b [8]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// ValidLogID reports whether s is a log id.
func ValidLogID(s string) bool { return logIDPattern.MatchString(s) }

// Origin names a store's log.
func Origin(store, log string) string { return OriginPrefix + store + "/" + log }

// Checkpoint is a store's signed statement of its log: the tree of its
// first Size leaves has root Root. First is the store sequence of leaf 0
// (a log covers the sequences First … First+Size-1, in order); Time is
// when the store signed it.
type Checkpoint struct {
	Store string
	Log   string
	Size  int64
	Root  Hash
	First uint64
	Time  time.Time
}

// maxCheckpointText bounds a checkpoint's text before it is parsed.
const maxCheckpointText = 512

// Text is the checkpoint in the C2SP tlog-checkpoint form: the origin,
// the size, the base64 root, then two extension lines, "first <seq>" and
// "time <RFC 3339, UTC>".
func (c Checkpoint) Text() string {
	return fmt.Sprintf("%s\n%d\n%s\nfirst %d\ntime %s\n", Origin(c.Store, c.Log), c.Size,
		base64.StdEncoding.EncodeToString(c.Root[:]), c.First, c.Time.UTC().Format(time.RFC3339Nano))
}

// ParseCheckpoint reads Text's form, strictly: any other line, field or
// form is refused.
func ParseCheckpoint(text string) (Checkpoint, error) {
	var c Checkpoint
	if len(text) > maxCheckpointText {
		return c, errors.New("ledger: checkpoint too long")
	}
	lines := strings.Split(text, "\n")
	if len(lines) != 6 || lines[5] != "" {
		return c, errors.New("ledger: a checkpoint has five lines")
	}
	rest, ok := strings.CutPrefix(lines[0], OriginPrefix)
	store, log, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || !storePattern.MatchString(store) || !ValidLogID(log) {
		return c, errors.New("ledger: checkpoint origin is not rxedge.ledger/<store>/<log>")
	}
	c.Store, c.Log = store, log
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return c, errors.New("ledger: checkpoint size is not a decimal count")
	}
	c.Size = size
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != len(c.Root) {
		return c, errors.New("ledger: checkpoint root is not a base64 SHA-256 hash")
	}
	copy(c.Root[:], root)
	first, ok := strings.CutPrefix(lines[3], "first ")
	if c.First, err = strconv.ParseUint(first, 10, 64); !ok || err != nil || c.First == 0 || strconv.FormatUint(c.First, 10) != first {
		return c, errors.New("ledger: checkpoint has no valid first line")
	}
	at, ok := strings.CutPrefix(lines[4], "time ")
	if c.Time, err = time.Parse(time.RFC3339Nano, at); !ok || err != nil {
		return c, errors.New("ledger: checkpoint has no valid time line")
	}
	return c, nil
}

// KeyName is the note key name of a store's signing key. A store that
// changes its key keeps the name; the note key hash tells keys apart.
func KeyName(store string) string { return "rxedge-store-" + store }

// GenerateKey makes a store's signing key: skey, the private key to keep
// on the store PC only, and vkey, the public verifier key that goes into
// the roster ("S0042 <vkey>").
func GenerateKey(rand io.Reader, store string) (skey, vkey string, err error) {
	if !storePattern.MatchString(store) {
		return "", "", errors.New("ledger: not a store id")
	}
	return note.GenerateKey(rand, KeyName(store))
}

// KeyID is what names a verifier key in a note signature:
// "<name>+<key hash, 8 hex digits>", the key's first two fields ("" when
// vkey has no such form).
func KeyID(vkey string) string {
	name, rest, ok := strings.Cut(vkey, "+")
	hash, _, ok2 := strings.Cut(rest, "+")
	if !ok || !ok2 || name == "" || len(hash) != 8 {
		return ""
	}
	return name + "+" + hash
}

// SignerKeyID is the KeyID of the key named for store that signed the
// note msg, read from its signature line without checking it ("" when no
// signature bears that name). A key whose KeyID differs did not sign it.
func SignerKeyID(msg []byte, store string) string {
	_, err := note.Open(msg, note.VerifierList())
	var e *note.UnverifiedNoteError
	if !errors.As(err, &e) {
		return ""
	}
	for _, sig := range e.Note.UnverifiedSigs {
		if sig.Name == KeyName(store) {
			return fmt.Sprintf("%s+%08x", sig.Name, sig.Hash)
		}
	}
	return ""
}

// Sign signs a checkpoint with a store's key, which must be that store's.
func Sign(c Checkpoint, s note.Signer) ([]byte, error) {
	if s.Name() != KeyName(c.Store) {
		return nil, fmt.Errorf("ledger: key %q cannot sign for store %s", s.Name(), c.Store)
	}
	return note.Sign(&note.Note{Text: c.Text()}, s)
}

// Open checks a signed checkpoint against known keys: it must carry a
// valid signature by a key named for the checkpoint's own store (another
// store's key, or only unknown keys, is refused). It returns the note
// (with every signature that verified, e.g. head office's countersignature
// as well) and the checkpoint.
func Open(msg []byte, known note.Verifiers) (*note.Note, Checkpoint, error) {
	n, err := note.Open(msg, known)
	if err != nil {
		return nil, Checkpoint{}, err
	}
	c, err := ParseCheckpoint(n.Text)
	if err != nil {
		return nil, Checkpoint{}, err
	}
	for _, sig := range n.Sigs {
		if sig.Name == KeyName(c.Store) {
			return n, c, nil
		}
	}
	return nil, Checkpoint{}, fmt.Errorf("ledger: checkpoint of store %s is not signed by a key of that store", c.Store)
}
