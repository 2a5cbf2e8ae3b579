package central_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/testkit/natstest"
)

// The subjects are what the server's permissions (configs/nats) grant, so
// they are pinned here as text.
func TestSubjects(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"movement", central.Subject("S0001", "0123abcd"), "rx.mv.S0001.0123abcd"},
		{"a store's movements", central.Subject("S0001", ">"), "rx.mv.S0001.>"},
		{"stream subjects", central.StreamSubjects, "rx.mv.>"},
		{"direct get", central.DirectGetSubject(central.Subject("S0001", "k")), "$JS.API.DIRECT.GET.RX_MOVEMENTS.rx.mv.S0001.k"},
		{"heartbeat", central.StatusSubject("S0001"), "rx.status.S0001"},
		{"every heartbeat", central.StatusSubjects, "rx.status.>"},
		{"control", command.Subject("S0001", "dlq.redrive"), "rx.ctl.S0001.dlq.redrive"},
		{"a store's control", command.Subject("S0001", ">"), "rx.ctl.S0001.>"},
		{"fleet key", central.FleetSubject("S0001"), "$KV.RX_FLEET.S0001"},
		{"every fleet key", central.FleetSubjects, "$KV.RX_FLEET.>"},
		{"inbox prefix", central.InboxPrefix("S0001"), "_INBOX_S0001"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// The batch headers are JetStream's protocol, spelled here so a client
// need not import orbit.go; they must stay what orbit.go sends.
func TestBatchHeadersMatchOrbit(t *testing.T) {
	for _, h := range []struct{ got, want string }{
		{central.HeaderBatchID, jetstreamext.BatchIDHeader},
		{central.HeaderBatchSeq, jetstreamext.BatchSeqHeader},
		{central.HeaderBatchCommit, jetstreamext.BatchCommitHeader},
	} {
		if h.got != h.want {
			t.Errorf("batch header %q, orbit.go sends %q", h.got, h.want)
		}
	}
}

func TestMessageMsg(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 30, 0, 5, time.FixedZone("EST", -5*3600))
	tests := []struct {
		name string
		m    central.Message
		want map[string]string
	}{
		{name: "controlled",
			m: central.Message{Store: "S0001", Key: "k1", Digest: "d1", Seq: 42, Schedule: "CII", EnqueuedAt: at, Payload: []byte(`{"n":1}`)},
			want: map[string]string{
				"Nats-Msg-Id": "k1-d1", "Nats-Expected-Last-Subject-Sequence": "0", "Rx-Digest": "d1",
				"Rx-Store": "S0001", "Rx-Seq": "42", "Rx-Schedule": "CII", "Rx-Enqueued-At": "2026-03-01T14:30:00.000000005Z",
			}},
		{name: "not controlled: no schedule header",
			m: central.Message{Store: "S0002", Key: "k2", Digest: "d2", Seq: 1, EnqueuedAt: at, Payload: []byte(`{}`)},
			want: map[string]string{
				"Nats-Msg-Id": "k2-d2", "Nats-Expected-Last-Subject-Sequence": "0", "Rx-Digest": "d2",
				"Rx-Store": "S0002", "Rx-Seq": "1", "Rx-Enqueued-At": "2026-03-01T14:30:00.000000005Z",
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.m.Msg()
			if want := "rx.mv." + tc.m.Store + "." + tc.m.Key; msg.Subject != want {
				t.Errorf("subject %q, want %q", msg.Subject, want)
			}
			if len(msg.Header) != len(tc.want) {
				t.Errorf("headers %v, want %v", msg.Header, tc.want)
			}
			for k, v := range tc.want {
				if got := msg.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if string(msg.Data) != string(tc.m.Payload) {
				t.Errorf("data %q, want %q", msg.Data, tc.m.Payload)
			}
		})
	}
}

// TestContractOnServer publishes a Message to a stream configured by
// StreamConfig and reads it back through DirectGetSubject, as an agent does.
func TestContractOnServer(t *testing.T) {
	srv := natstest.StartHub(t)
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	m := central.Message{Store: "S0001", Key: "k1", Digest: "d1", Seq: 1, EnqueuedAt: time.Now(), Payload: []byte(`{"n":1}`)}
	ack, err := js.PublishMsg(ctx, m.Msg())
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ack.Stream != central.StreamName || ack.Duplicate {
		t.Fatalf("PubAck = %+v, want a new message in %s", ack, central.StreamName)
	}
	// A single server checks the expected sequence before the message id:
	// the subject is taken, so the resend is refused, never stored again.
	_, err = js.PublishMsg(ctx, m.Msg())
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("resend: error %v, want API error %d", err, jetstream.JSErrCodeStreamWrongLastSequence)
	}

	resp, err := nc.RequestWithContext(ctx, central.DirectGetSubject(central.Subject("S0001", "k1")), nil)
	if err != nil {
		t.Fatalf("direct get: %v", err)
	}
	if got := resp.Header.Get(central.HeaderDigest); got != "d1" {
		t.Errorf("direct get: %s = %q, want d1 (headers %v)", central.HeaderDigest, got, resp.Header)
	}
	resp, err = nc.RequestWithContext(ctx, central.DirectGetSubject(central.Subject("S0001", "none")), nil)
	if err != nil {
		t.Fatalf("direct get of an empty subject: %v", err)
	}
	if st := resp.Header.Get("Status"); st != "404" {
		t.Errorf("direct get of an empty subject: status %q, want 404", st)
	}
}
