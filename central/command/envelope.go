package command

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nkeys"
)

// Commands, the last tokens of their subjects.
const (
	CmdStatus     = "status"      // the store's status document
	CmdDLQList    = "dlq.list"    // its quarantine, without payloads
	CmdDLQRedrive = "dlq.redrive" // send quarantined movements again: signed
)

// Prefix starts every control subject; only operators may publish them.
const Prefix = "rx.ctl."

// Subject is the subject of cmd for store: rx.ctl.<store>.<cmd>.
// Subject(store, ">") is every command an agent subscribes to.
func Subject(store, cmd string) string { return Prefix + store + "." + cmd }

// ReadOnly reports whether cmd only reads, and so may come unsigned when
// the agent allows unsigned reads (remote.allow_unsigned_reads).
func ReadOnly(cmd string) bool { return cmd == CmdStatus || cmd == CmdDLQList }

// Time limits of a signed command.
const (
	// MaxLifetime is the longest a signed command may be valid: an agent
	// refuses one whose expiry is further ahead of its clock than
	// MaxLifetime plus Skew.
	MaxLifetime = 5 * time.Minute
	// Skew is the clock difference tolerated between the operator's
	// machine and the store's, both ways: a command is refused as expired
	// only once the agent's clock is Skew past its expiry.
	Skew = 30 * time.Second
	// DefaultValidity is how long the client's commands are valid.
	DefaultValidity = 2 * time.Minute
)

// Envelope is a control command as sent:
//
//	{"cmd":"dlq.redrive","store":"S0001","args":{…},
//	 "nonce":"<UUIDv7>","expires":"<RFC 3339>",
//	 "key":"<operator public key U…>","sig":"<base64url signature>"}
//
// A signed command has every field: Sig is the operator key's Ed25519
// signature, unpadded base64url, of SigningBytes. An unsigned one (a read
// an agent allows unsigned) needs none: it may be empty altogether, and a
// cmd or store it names must match its subject's.
type Envelope struct {
	Cmd     string          `json:"cmd"`
	Store   string          `json:"store"`
	Args    json.RawMessage `json:"args,omitempty"`
	Nonce   string          `json:"nonce,omitempty"`
	Expires string          `json:"expires,omitempty"`
	Key     string          `json:"key,omitempty"`
	Sig     string          `json:"sig,omitempty"`
}

// NewEnvelope returns the unsigned command cmd for store with args (nil
// for none).
func NewEnvelope(store, cmd string, args any) (Envelope, error) {
	e := Envelope{Cmd: cmd, Store: store}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return e, fmt.Errorf("remote: encode the arguments of %s: %w", cmd, err)
		}
		e.Args = b
	}
	return e, nil
}

// signingDomain starts the signed bytes, so that a signature made for a
// control command means nothing anywhere else.
const signingDomain = "rxedge-ctl-v2\n"

// MaxEnvelopeBytes bounds a command's envelope.
const MaxEnvelopeBytes = 64 << 10

// SigningBytes are the bytes an operator signs for the command e sent to
// subject: signingDomain followed by the subject and the envelope's JSON
// with sig empty, its fields in this order and args exactly as sent (null
// when absent):
//
//	rxedge-ctl-v2
//	{"subject":"rx.ctl.S0001.dlq.redrive","cmd":"…","store":"…","args":{…},"nonce":"…","expires":"…","key":"…","sig":""}
//
// Signer and verifier both use this function; the verifier passes the
// subject the message arrived on. The subject, the command and the store
// are inside, so a signature for one store, subject or command cannot be
// used for another. The string fields of a valid envelope are plain ASCII
// that JSON does not escape, so another implementation builds the same
// bytes by quoting them.
func (e Envelope) SigningBytes(subject string) []byte {
	var b bytes.Buffer
	b.WriteString(signingDomain)
	field := func(sep, name, v string) {
		b.WriteString(sep + `"` + name + `":`)
		q, _ := json.Marshal(v) // a string always encodes
		b.Write(q)
	}
	field("{", "subject", subject)
	field(",", "cmd", e.Cmd)
	field(",", "store", e.Store)
	b.WriteString(`,"args":`)
	if len(e.Args) == 0 {
		b.WriteString("null")
	} else {
		b.Write(e.Args)
	}
	field(",", "nonce", e.Nonce)
	field(",", "expires", e.Expires)
	field(",", "key", e.Key)
	b.WriteString(`,"sig":""}`)
	return b.Bytes()
}

// Signer signs commands with an operator's NKey.
type Signer struct {
	kp  nkeys.KeyPair
	pub string
}

// NewSigner returns a signer for an operator's user seed (SU…), bare or in
// a decorated .creds/.nk file.
func NewSigner(seed []byte) (*Signer, error) {
	seed = bytes.TrimSpace(seed)
	var (
		kp  nkeys.KeyPair
		err error
	)
	if bytes.HasPrefix(seed, []byte("SU")) && !bytes.ContainsAny(seed, "\r\n") {
		kp, err = nkeys.FromSeed(seed)
	} else {
		kp, err = nkeys.ParseDecoratedUserNKey(seed)
	}
	if err != nil {
		return nil, fmt.Errorf("not an NKey user seed (SU…): %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return nil, errors.New("not an NKey user seed (SU…)")
	}
	return &Signer{kp: kp, pub: pub}, nil
}

// NewOperatorKey makes an operator's key from the randomness of r
// (crypto/rand.Reader): an NKey user seed (SU…), for the seed file that
// signs commands (LoadSigner), and its public key (U…), for the stores'
// remote.operator_keys.
func NewOperatorKey(r io.Reader) (seed []byte, pub string, err error) {
	kp, err := nkeys.CreatePairWithRand(nkeys.PrefixByteUser, r)
	if err != nil {
		return nil, "", fmt.Errorf("command: make an operator key: %w", err)
	}
	if seed, err = kp.Seed(); err != nil {
		return nil, "", err
	}
	if pub, err = kp.PublicKey(); err != nil {
		return nil, "", err
	}
	return seed, pub, nil
}

// LoadSigner reads an operator's seed file.
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	s, err := NewSigner(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// PublicKey is the operator's public key, as listed in the agents'
// remote.operator_keys.
func (s *Signer) PublicKey() string { return s.pub }

// Sign signs e: it sets a new UUIDv7 nonce, the expiry now+validFor (at
// most MaxLifetime), the key and the signature. Args are brought to the
// form json.Marshal sends, so that what is signed is what is sent.
func (s *Signer) Sign(e *Envelope, now time.Time, validFor time.Duration) error {
	if validFor <= 0 || validFor > MaxLifetime {
		return fmt.Errorf("remote: a command is valid for more than 0 and at most %s, not %s", MaxLifetime, validFor)
	}
	if len(e.Args) > 0 {
		b, err := json.Marshal(e.Args)
		if err != nil {
			return fmt.Errorf("remote: the arguments of %s are not JSON: %w", e.Cmd, err)
		}
		e.Args = b
	}
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	e.Nonce = id.String()
	// Whole seconds, rounded down: never later than asked.
	e.Expires = now.Add(validFor).UTC().Truncate(time.Second).Format(time.RFC3339)
	e.Key = s.pub
	e.Sig = ""
	sig, err := s.kp.Sign(e.SigningBytes(Subject(e.Store, e.Cmd)))
	if err != nil {
		return fmt.Errorf("remote: sign %s: %w", e.Cmd, err)
	}
	e.Sig = base64.RawURLEncoding.EncodeToString(sig)
	return nil
}

// ErrMalformed is matched by DecodeEnvelope's errors.
var ErrMalformed = errors.New("the command is not a JSON envelope with the fields cmd, store, args, nonce, expires, key and sig")

// DecodeEnvelope decodes a command strictly: one JSON object of at most
// MaxEnvelopeBytes with no unknown field. Empty data (blank) is the empty
// envelope. Its errors never quote the data.
func DecodeEnvelope(data []byte) (Envelope, error) {
	var e Envelope
	if len(data) > MaxEnvelopeBytes {
		return e, fmt.Errorf("%w (it is larger than %d bytes)", ErrMalformed, MaxEnvelopeBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return e, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || dec.More() {
		return Envelope{}, ErrMalformed
	}
	if _, err := dec.Token(); err != io.EOF {
		return Envelope{}, ErrMalformed
	}
	return e, nil
}

// Signature decodes the envelope's signature, base64url with or without
// padding.
func (e Envelope) Signature() ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(e.Sig, "="))
}

// Clip bounds a value a peer sent (a store id, a command name) before it
// is quoted back in an error: at most 40 runes.
func Clip(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}
