package provision_test

// These tests pin what nats.go v1.55.0 reports for each publish outcome
// against nats-server v2.15.2 and the RX_MOVEMENTS settings. The sync
// engine classifies by exactly these values; a dependency upgrade that
// changes one fails here first.

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/hub"
)

// publish sends one movement the way the agent does: Nats-Msg-Id is the
// key, and the subject must hold no message yet.
func publish(ctx context.Context, js jetstream.JetStream, store, key string, data []byte) (*jetstream.PubAck, error) {
	m := nats.NewMsg(central.Subject(store, key))
	m.Header.Set(jetstream.MsgIDHeader, key)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m.Header.Set("Rx-Digest", "digest-of-"+key)
	m.Data = data
	return js.PublishMsg(ctx, m)
}

// wantAPIError checks err is a *jetstream.APIError with these codes and
// description.
func wantAPIError(t *testing.T, err error, code, errCode int, description string) {
	t.Helper()
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error = %v (%T), want *jetstream.APIError %d", err, err, errCode)
	}
	if apiErr.Code != code || int(apiErr.ErrorCode) != errCode || apiErr.Description != description {
		t.Errorf("APIError = {Code:%d ErrorCode:%d Description:%q}, want {Code:%d ErrorCode:%d Description:%q}",
			apiErr.Code, apiErr.ErrorCode, apiErr.Description, code, errCode, description)
	}
}

// resend publishes to rx.mv.S1.k1 with the given headers.
func resend(ctx context.Context, js jetstream.JetStream, header map[string]string) (*jetstream.PubAck, error) {
	m := nats.NewMsg(central.Subject("S1", "k1"))
	for k, v := range header {
		m.Header.Set(k, v)
	}
	m.Data = []byte(`{}`)
	return js.PublishMsg(ctx, m)
}

var (
	bothHeaders = map[string]string{jetstream.MsgIDHeader: "k1", jetstream.ExpectedLastSubjSeqHeader: "0"}
	msgIDOnly   = map[string]string{jetstream.MsgIDHeader: "k1"}
)

// outcome is what a publish should get: a PubAck or an API error.
type outcome struct {
	duplicate   bool // a PubAck, duplicate or not, when errCode is 0
	code        int
	errCode     int
	description string
}

func checkOutcome(t *testing.T, ack *jetstream.PubAck, err error, want outcome) {
	t.Helper()
	if want.errCode != 0 {
		wantAPIError(t, err, want.code, want.errCode, want.description)
		return
	}
	if err != nil {
		t.Fatalf("publish error = %v, want a PubAck with Duplicate=%v", err, want.duplicate)
	}
	if ack.Duplicate != want.duplicate || ack.Sequence != 1 {
		t.Errorf("PubAck = %+v, want sequence 1, Duplicate=%v", ack, want.duplicate)
	}
}

// On a single server (R1, not clustered) the server checks
// Nats-Expected-Last-Subject-Sequence before Nats-Msg-Id: a resend of a
// stored movement with the agent's headers is answered 10071 even inside
// the duplicate window, never with a duplicate PubAck. (An R3 stream in a
// cluster checks the id first; see testkit/natstest.)
func TestPublishSecondMessageForSubject(t *testing.T) {
	tests := []struct {
		name   string
		header map[string]string
		want   outcome
	}{
		{name: "same key with the agent's headers", header: bothHeaders,
			want: outcome{code: 400, errCode: 10071, description: "wrong last sequence: 1"}},
		{name: "same key, Nats-Msg-Id only", header: msgIDOnly,
			want: outcome{duplicate: true}},
		{name: "other msg id, expected last subject sequence 0",
			header: map[string]string{jetstream.MsgIDHeader: "other", jetstream.ExpectedLastSubjSeqHeader: "0"},
			want:   outcome{code: 400, errCode: 10071, description: "wrong last sequence: 1"}},
		{name: "no headers", header: map[string]string{},
			want: outcome{code: 503, errCode: 10077, description: "maximum messages per subject exceeded"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startHub(t, hub.Options{})
			_, js := connect(t, h.URL())
			ack, err := publish(testContext(t), js, "S1", "k1", []byte(`{}`))
			if err != nil {
				t.Fatalf("first publish: %v", err)
			}
			if ack.Duplicate || ack.Stream != central.StreamName || ack.Sequence != 1 {
				t.Fatalf("first PubAck = %+v, want stream %s, sequence 1, not duplicate", ack, central.StreamName)
			}
			ack, err = resend(testContext(t), js, tc.header)
			checkOutcome(t, ack, err, tc.want)
		})
	}
}

func TestPublishAfterDuplicateWindow(t *testing.T) {
	h := startHub(t, hub.Options{Stream: central.StreamOptions{DuplicateWindow: time.Second}})
	_, js := connect(t, h.URL())
	if _, err := publish(testContext(t), js, "S1", "k1", []byte(`{}`)); err != nil {
		t.Fatalf("first publish: %v", err)
	}

	// The server forgets message ids on a timer, at the earliest one window
	// after the publish; until then a resend with only the id is answered
	// as a duplicate. Resending has no side effect, so poll until it is not.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ack, err := resend(testContext(t), js, msgIDOnly)
		if err != nil || !ack.Duplicate {
			checkOutcome(t, ack, err, outcome{code: 503, errCode: 10077, description: "maximum messages per subject exceeded"})
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("resend still answered as a duplicate 10s after the first publish with a 1s window")
		}
		time.Sleep(100 * time.Millisecond)
	}

	_, err := resend(testContext(t), js, bothHeaders)
	wantAPIError(t, err, 400, 10071, "wrong last sequence: 1")
	if !errors.Is(err, &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}) {
		t.Errorf("errors.Is(err, &APIError{ErrorCode: JSErrCodeStreamWrongLastSequence}) = false for %v", err)
	}
	if got, want := err.Error(), "nats: nats: API error: code=400 err_code=10071 description=wrong last sequence: 1"; got != want {
		t.Errorf("error text = %q, want %q", got, want)
	}

	// An atomic batch holding the stored key is refused whole.
	_, err = jetstreamext.PublishMsgBatch(testContext(t), js, batch("S1", "new1", "k1", "new2"))
	wantAPIError(t, err, 400, 10071, "wrong last sequence: 1")
}

func TestPublishTooLarge(t *testing.T) {
	tests := []struct {
		name string
		opts hub.Options
		size int
		// check inspects the publish error.
		check func(t *testing.T, err error)
	}{
		{
			name: "over the server's max_payload",
			opts: hub.Options{MaxPayload: 1024},
			size: 2000,
			check: func(t *testing.T, err error) {
				// nats.go refuses it before sending: the server never sees it.
				if !errors.Is(err, nats.ErrMaxPayload) {
					t.Errorf("error = %v, want nats.ErrMaxPayload", err)
				}
				if got, want := err.Error(), "nats: maximum payload exceeded"; got != want {
					t.Errorf("error text = %q, want %q", got, want)
				}
			},
		},
		{
			name: "over the stream's max_msg_size",
			opts: hub.Options{Stream: central.StreamOptions{MaxMsgSize: 512}},
			size: 600,
			check: func(t *testing.T, err error) {
				wantAPIError(t, err, 400, 10054, "message size exceeds maximum allowed")
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startHub(t, tc.opts)
			_, js := connect(t, h.URL())
			_, err := publish(testContext(t), js, "S1", "big", bytes.Repeat([]byte("x"), tc.size))
			if err == nil {
				t.Fatal("publish succeeded, want an error")
			}
			tc.check(t, err)
		})
	}
}

func TestPublishStreamFull(t *testing.T) {
	tests := []struct {
		name        string
		stream      central.StreamOptions
		description string
	}{
		{name: "max_msgs", stream: central.StreamOptions{MaxMsgs: 2}, description: "maximum messages exceeded"},
		{name: "max_bytes", stream: central.StreamOptions{MaxBytes: 300}, description: "maximum bytes exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startHub(t, hub.Options{Stream: tc.stream})
			_, js := connect(t, h.URL())
			payload := bytes.Repeat([]byte("x"), 100)
			var err error
			for i := 0; i < 10 && err == nil; i++ {
				_, err = publish(testContext(t), js, "S1", "k"+string(rune('0'+i)), payload)
			}
			if err == nil {
				t.Fatal("10 publishes succeeded, want the stream to fill")
			}
			wantAPIError(t, err, 503, 10077, tc.description)
		})
	}
}

func TestDirectGetLastForSubject(t *testing.T) {
	h := startHub(t, hub.Options{})
	_, js := connect(t, h.URL())
	ctx := testContext(t)
	ack, err := publish(ctx, js, "S1", "k1", []byte(`{"n":1}`))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	s, err := js.Stream(ctx, central.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}

	got, err := s.GetLastMsgForSubject(ctx, central.Subject("S1", "k1"))
	if err != nil {
		t.Fatalf("GetLastMsgForSubject: %v", err)
	}
	if got.Sequence != ack.Sequence || got.Subject != "rx.mv.S1.k1" || string(got.Data) != `{"n":1}` {
		t.Errorf("got message seq %d subject %q data %q, want seq %d subject rx.mv.S1.k1 data {\"n\":1}",
			got.Sequence, got.Subject, got.Data, ack.Sequence)
	}
	for k, want := range map[string]string{
		"Rx-Digest":                         "digest-of-k1",
		jetstream.MsgIDHeader:               "k1",
		jetstream.ExpectedLastSubjSeqHeader: "0",
		jetstream.StreamHeader:              central.StreamName,
		jetstream.SubjectHeader:             "rx.mv.S1.k1",
		jetstream.SequenceHeader:            "1",
	} {
		if v := got.Header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}

	_, err = s.GetLastMsgForSubject(ctx, central.Subject("S1", "missing"))
	if !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("get of a missing subject: error = %v, want jetstream.ErrMsgNotFound", err)
	}
	if err != nil && !strings.Contains(err.Error(), "message not found") {
		t.Errorf("error text = %q, want it to mention message not found", err)
	}
}

// batch builds the messages of an atomic batch of movements, with the
// agent's headers.
func batch(store string, keys ...string) []*nats.Msg {
	var msgs []*nats.Msg
	for _, key := range keys {
		m := nats.NewMsg(central.Subject(store, key))
		m.Header.Set(jetstream.MsgIDHeader, key)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		m.Data = []byte(`{}`)
		msgs = append(msgs, m)
	}
	return msgs
}

func TestAtomicBatch(t *testing.T) {
	tests := []struct {
		name   string
		stream central.StreamOptions
		stored []string // published one by one first
		keys   []string // then as one batch
		// errCode 0 means the batch is stored whole.
		code        int
		errCode     int
		description string
	}{
		{name: "all new", keys: []string{"a", "b", "c"}},
		{name: "one member stored inside the duplicate window", stored: []string{"b"}, keys: []string{"a", "b", "c"},
			code: 400, errCode: 10201, description: "atomic publish batch contains duplicate message id"},
		{name: "the same key twice in one batch", keys: []string{"a", "b", "a"},
			code: 400, errCode: 10201, description: "atomic publish batch contains duplicate message id"},
		{name: "stream full", stream: central.StreamOptions{MaxMsgs: 2}, keys: []string{"a", "b", "c"},
			code: 503, errCode: 10077, description: "maximum messages exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startHub(t, hub.Options{Stream: tc.stream})
			_, js := connect(t, h.URL())
			for _, k := range tc.stored {
				if _, err := publish(testContext(t), js, "S1", k, []byte(`{}`)); err != nil {
					t.Fatalf("publish %s: %v", k, err)
				}
			}
			ack, err := jetstreamext.PublishMsgBatch(testContext(t), js, batch("S1", tc.keys...))
			if tc.errCode != 0 {
				wantAPIError(t, err, tc.code, tc.errCode, tc.description)
			} else if err != nil {
				t.Fatalf("PublishMsgBatch: %v", err)
			} else if int(ack.BatchSize) != len(tc.keys) {
				t.Errorf("BatchAck = %+v, want batch size %d", ack, len(tc.keys))
			}
			s, err := js.Stream(testContext(t), central.StreamName)
			if err != nil {
				t.Fatalf("stream info: %v", err)
			}
			want := uint64(len(tc.stored))
			if tc.errCode == 0 {
				want += uint64(len(tc.keys))
			}
			if got := s.CachedInfo().State.Msgs; got != want {
				t.Errorf("stream holds %d messages, want %d: a batch is all or nothing", got, want)
			}
		})
	}
}
