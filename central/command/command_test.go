package command_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/testkit/ledgertest"
)

// TestSigningBytes pins the bytes an operator signs: a change here breaks
// every other implementation of the signer.
func TestSigningBytes(t *testing.T) {
	e := command.Envelope{
		Cmd: "dlq.redrive", Store: "S0001", Args: []byte(`{"keys":["k"],"reason_text":"<why>"}`),
		Nonce: "0190a4b2-0000-7000-8000-000000000000", Expires: "2026-03-01T12:05:00Z",
		Key: "UABC", Sig: "ignored",
	}
	want := "rxedge-ctl-v2\n" +
		`{"subject":"rx.ctl.S0001.dlq.redrive","cmd":"dlq.redrive","store":"S0001","args":{"keys":["k"],"reason_text":"<why>"},` +
		`"nonce":"0190a4b2-0000-7000-8000-000000000000","expires":"2026-03-01T12:05:00Z","key":"UABC","sig":""}`
	if got := string(e.SigningBytes("rx.ctl.S0001.dlq.redrive")); got != want {
		t.Errorf("SigningBytes:\n got %s\nwant %s", got, want)
	}
	e.Args = nil
	if got := string(e.SigningBytes("rx.ctl.S0001.dlq.redrive")); !strings.Contains(got, `"args":null,`) {
		t.Errorf("SigningBytes without args = %s, want args null", got)
	}
}

// TestSignatureBindsEveryField signs an envelope, checks the signature
// with nkeys as an agent does, and checks that changing any field, the
// store and the command among them, breaks it.
func TestSignatureBindsEveryField(t *testing.T) {
	op := ledgertest.OperatorSigner(t)
	e, err := command.NewEnvelope("S0001", command.CmdDLQRedrive, command.RedriveArgs{Selection: dlq.Selection{All: true}, ReasonText: "a <b> & c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Sign(&e, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	// What is sent is what was signed: the args survive the envelope's
	// encoding byte for byte.
	var sent command.Envelope
	if err := json.Unmarshal(mustJSON(t, e), &sent); err != nil {
		t.Fatal(err)
	}
	subject := command.Subject("S0001", command.CmdDLQRedrive)
	verify := func(e command.Envelope) error {
		kp, err := nkeys.FromPublicKey(e.Key)
		if err != nil {
			return err
		}
		sig, err := base64.RawURLEncoding.DecodeString(e.Sig)
		if err != nil {
			return err
		}
		return kp.Verify(e.SigningBytes(subject), sig)
	}
	if err := verify(sent); err != nil {
		t.Fatalf("the signed envelope as sent does not verify: %v", err)
	}
	if _, err := time.Parse(time.RFC3339, sent.Expires); err != nil || len(sent.Nonce) != 36 || sent.Key != op.PublicKey() {
		t.Errorf("envelope %+v: want a UUID nonce, an RFC 3339 expiry and the operator's key", sent)
	}
	for name, change := range map[string]func(*command.Envelope){
		"store":   func(e *command.Envelope) { e.Store = "S0002" },
		"cmd":     func(e *command.Envelope) { e.Cmd = command.CmdStatus },
		"args":    func(e *command.Envelope) { e.Args = []byte(`{"all":true,"reason_text":"other"}`) },
		"nonce":   func(e *command.Envelope) { e.Nonce = "0190a4b2-0000-7000-8000-000000000001" },
		"expires": func(e *command.Envelope) { e.Expires = "2099-01-01T00:00:00Z" },
		"key":     func(e *command.Envelope) { e.Key = ledgertest.OperatorSigner(t).PublicKey() },
	} {
		c := sent
		change(&c)
		if verify(c) == nil {
			t.Errorf("the signature still verifies with another %s", name)
		}
	}
	subject = command.Subject("S0002", command.CmdDLQRedrive)
	if verify(sent) == nil {
		t.Error("the signature still verifies on another subject")
	}
}

// FuzzEnvelope checks that decoding any bytes neither panics nor accepts
// more than one value, that a decoded envelope encodes and decodes to
// the same signing bytes, and that decoding allocates within the bound
// (envelopeBytesPerByte a byte, plus envelopeBytesFixed).
func FuzzEnvelope(f *testing.F) {
	f.Add([]byte(`{"cmd":"dlq.redrive","store":"S0001","args":{"all":true},"nonce":"0190a4b2-0000-7000-8000-000000000000","expires":"2026-03-01T12:05:00Z","key":"UABC","sig":"AAAA"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"cmd":"status"} {"cmd":"status"}`))
	f.Add([]byte(`{"args":[[[[[[[[[[[[]]]]]]]]]]]]}`))
	f.Add([]byte("\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkEnvelopeBound(t, data)
		e, err := command.DecodeEnvelope(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(e)
		if err != nil {
			return // args that json.Marshal compacts differently are refused by the signature
		}
		again, err := command.DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("an envelope does not decode after encoding: %v", err)
		}
		subject := command.Subject(e.Store, e.Cmd)
		if e.Cmd != again.Cmd || e.Store != again.Store || e.Nonce != again.Nonce || e.Key != again.Key || e.Sig != again.Sig || e.Expires != again.Expires {
			t.Fatalf("round trip changed the envelope: %+v → %+v", e, again)
		}
		_ = again.SigningBytes(subject)
	})
}

// TestReconcileLimitsFitAnEnvelope: the largest request allowed, with the
// largest sequences, fits in a command's envelope, signed.
func TestReconcileLimitsFitAnEnvelope(t *testing.T) {
	a := command.ReconcileArgs{SyncedAfter: time.Now()}
	for i := range command.MaxReconcileRanges {
		s := ^uint64(0) - uint64(2*i)
		a.Seqs = append(a.Seqs, command.SeqRange{s, s})
	}
	e, err := command.NewEnvelope("S0001", command.CmdReconcile, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgertest.OperatorSigner(t).Sign(&e, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := len(mustJSON(t, e)); n > command.MaxEnvelopeBytes {
		t.Errorf("the largest reconcile request is %d bytes, over the envelope's %d", n, command.MaxEnvelopeBytes)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNewOperatorKey: the key made is a user seed the signer loads, whose
// public key is the one returned, and different each time.
func TestNewOperatorKey(t *testing.T) {
	seed, pub, err := command.NewOperatorKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := command.NewSigner(seed)
	if err != nil || s.PublicKey() != pub || !strings.HasPrefix(string(seed), "SU") || !strings.HasPrefix(pub, "U") {
		t.Fatalf("seed %.2s…, public %s: signer %v, %v", seed, pub, s, err)
	}
	if _, again, _ := command.NewOperatorKey(rand.Reader); again == pub {
		t.Error("two keys made are the same")
	}
	if _, _, err := command.NewOperatorKey(strings.NewReader("short")); err == nil {
		t.Error("a key made of 5 bytes of randomness")
	}
}
