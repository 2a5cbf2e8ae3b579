package central_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

const (
	testKey    = "0123456789abcdef0123456789abcdef"
	testDigest = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	testFile   = "0190c1b2-7a3e-7c4d-9e8f-0123456789ab"
	testPrev   = "0190c1b2-7a3e-7c4d-9e8f-ba9876543210"
)

// The compact form: the exact header set an agent sends, which the
// readers below and central's permissions and stream settings rely on.
func TestMessageMsg(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 30, 0, 123456789, time.FixedZone("EST", -5*3600))
	atMicros := "1772375400123456"
	replaced := central.FileLineage{ID: testFile, Prev: testPrev, Base: 5000, Origin: "replaced"}
	tests := []struct {
		name string
		m    central.Message
		want map[string]string
	}{
		{name: "a movement",
			m: central.Message{Store: "S0001", Key: testKey, Digest: testDigest, Seq: 42, EnqueuedAt: at, Payload: []byte(`{"n":1}`), File: central.FileLineage{ID: testFile}},
			want: map[string]string{
				"Nats-Msg-Id": testKey + "-" + testDigest, "Nats-Expected-Last-Subject-Sequence": "0",
				"Rx-Seq": "42", "Rx-Enqueued-At": atMicros, "Rx-File": testFile,
			}},
		{name: "a file without identity",
			m: central.Message{Store: "S0002", Key: testKey, Digest: testDigest, Seq: 1, EnqueuedAt: at, Payload: []byte(`{}`)},
			want: map[string]string{
				"Nats-Msg-Id": testKey + "-" + testDigest, "Nats-Expected-Last-Subject-Sequence": "0",
				"Rx-Seq": "1", "Rx-Enqueued-At": atMicros,
			}},
		{name: "a continued file's first sequence carries its lineage",
			m: central.Message{Store: "S0001", Key: testKey, Digest: testDigest, Seq: 5001, EnqueuedAt: at, File: replaced},
			want: map[string]string{
				"Nats-Msg-Id": testKey + "-" + testDigest, "Nats-Expected-Last-Subject-Sequence": "0",
				"Rx-Seq": "5001", "Rx-Enqueued-At": atMicros, "Rx-File": testFile,
				"Rx-File-Prev": testPrev, "Rx-File-Base": "5000", "Rx-File-Origin": "replaced",
			}},
		{name: "the last sequence of the span carries it",
			m: central.Message{Store: "S0001", Key: testKey, Digest: testDigest, Seq: 5000 + central.LineageSpan, EnqueuedAt: at, File: replaced},
			want: map[string]string{
				"Nats-Msg-Id": testKey + "-" + testDigest, "Nats-Expected-Last-Subject-Sequence": "0",
				"Rx-Seq": "6000", "Rx-Enqueued-At": atMicros, "Rx-File": testFile,
				"Rx-File-Prev": testPrev, "Rx-File-Base": "5000", "Rx-File-Origin": "replaced",
			}},
		{name: "past the span: no lineage",
			m: central.Message{Store: "S0001", Key: testKey, Digest: testDigest, Seq: 5001 + central.LineageSpan, EnqueuedAt: at, File: replaced},
			want: map[string]string{
				"Nats-Msg-Id": testKey + "-" + testDigest, "Nats-Expected-Last-Subject-Sequence": "0",
				"Rx-Seq": "6001", "Rx-Enqueued-At": atMicros, "Rx-File": testFile,
			}},
		{name: "past the span, asked for: lineage",
			m: central.Message{Store: "S0001", Key: testKey, Digest: testDigest, Seq: 9999, EnqueuedAt: at, File: replaced, Lineage: true},
			want: map[string]string{
				"Nats-Msg-Id": testKey + "-" + testDigest, "Nats-Expected-Last-Subject-Sequence": "0",
				"Rx-Seq": "9999", "Rx-Enqueued-At": atMicros, "Rx-File": testFile,
				"Rx-File-Prev": testPrev, "Rx-File-Base": "5000", "Rx-File-Origin": "replaced",
			}},
		{name: "asked for, a file that continues nothing: none",
			m: central.Message{Store: "S0001", Key: testKey, Digest: testDigest, Seq: 3, EnqueuedAt: at, File: central.FileLineage{ID: testFile}, Lineage: true},
			want: map[string]string{
				"Nats-Msg-Id": testKey + "-" + testDigest, "Nats-Expected-Last-Subject-Sequence": "0",
				"Rx-Seq": "3", "Rx-Enqueued-At": atMicros, "Rx-File": testFile,
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

// fullForm is a movement's headers as agents before the compact form sent
// them, written out as they are in central's archive.
func fullForm() nats.Header {
	return nats.Header{
		"Nats-Msg-Id":                         {testKey + "-" + testDigest[:32]},
		"Nats-Expected-Last-Subject-Sequence": {"0"},
		"Rx-Digest":                           {testDigest},
		"Rx-Store":                            {"S0001"},
		"Rx-Seq":                              {"5001"},
		"Rx-Schedule":                         {"CII"},
		"Rx-Enqueued-At":                      {"2026-03-01T14:30:00.123456789Z"},
		"Rx-File":                             {testFile},
		"Rx-File-Prev":                        {testPrev},
		"Rx-File-Base":                        {"5000"},
		"Rx-File-Origin":                      {"replaced"},
	}
}

// Every reader goes through these: both forms read the same.
func TestReadersAcceptBothForms(t *testing.T) {
	at := time.Date(2026, 3, 1, 14, 30, 0, 123456789, time.UTC)
	compact := central.Message{Store: "S0001", Key: testKey, Digest: testDigest, Seq: 5001, EnqueuedAt: at,
		File: central.FileLineage{ID: testFile, Prev: testPrev, Base: 5000, Origin: "replaced"}}.Msg().Header
	for _, tc := range []struct {
		name string
		h    nats.Header
		at   time.Time
	}{
		{"full form", fullForm(), at},
		{"compact form", compact, at.Truncate(time.Microsecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := central.KeyOfMsgID(tc.h.Get(central.HeaderMsgID)); got != testKey {
				t.Errorf("key %q, want %q", got, testKey)
			}
			if got := central.DigestOf(tc.h); got != testDigest {
				t.Errorf("digest %q, want %q", got, testDigest)
			}
			if !central.StoreAgrees(tc.h, "S0001") {
				t.Errorf("the headers do not agree with their own store")
			}
			if got, ok := central.EnqueuedAtOf(tc.h); !ok || !got.Equal(tc.at) {
				t.Errorf("enqueued at %v (%v), want %v", got, ok, tc.at)
			}
			want := central.FileLineage{ID: testFile, Prev: testPrev, Base: 5000, Origin: "replaced"}
			if got := central.FileLineageOf(tc.h); got != want {
				t.Errorf("file %+v, want %+v", got, want)
			}
		})
	}
}

// What a reader makes of headers a store got wrong, or forged: a store's
// credentials let it set any header on its own subjects.
func TestReadersRefuseMalformed(t *testing.T) {
	edit := func(h nats.Header, f func(nats.Header)) nats.Header { f(h); return h }
	compact := func() nats.Header {
		return central.Message{Store: "S0001", Key: testKey, Digest: testDigest, Seq: 1, EnqueuedAt: time.Now()}.Msg().Header
	}
	t.Run("another store named", func(t *testing.T) {
		if central.StoreAgrees(fullForm(), "S0002") {
			t.Error("Rx-Store S0001 agrees with S0002")
		}
		if central.StoreAgrees(edit(compact(), func(h nats.Header) { h[central.HeaderStore] = nil }), "S0001") {
			t.Error("an empty Rx-Store agrees")
		}
		if central.StoreAgrees(edit(compact(), func(h nats.Header) { h.Set(central.HeaderStore, "") }), "S0001") {
			t.Error("Rx-Store \"\" agrees")
		}
	})
	for _, tc := range []struct {
		name string
		h    nats.Header
	}{
		{"no msg id", edit(compact(), func(h nats.Header) { h.Del(central.HeaderMsgID) })},
		{"a key only", edit(compact(), func(h nats.Header) { h.Set(central.HeaderMsgID, testKey) })},
		{"an old id without Rx-Digest", edit(fullForm(), func(h nats.Header) { h.Del(central.HeaderDigest) })},
		{"a digest one short", edit(compact(), func(h nats.Header) { h.Set(central.HeaderMsgID, testKey+"-"+testDigest[1:]) })},
		{"a digest one long", edit(compact(), func(h nats.Header) { h.Set(central.HeaderMsgID, testKey+"-"+testDigest+"0") })},
	} {
		if got := central.DigestOf(tc.h); got != "" {
			t.Errorf("%s: digest %q, want none", tc.name, got)
		}
	}
	for _, v := range []string{"", "yesterday", "-5", "1e9", "17723754001234561772375400123456", "2026-13-01T00:00:00Z"} {
		h := edit(compact(), func(h nats.Header) { h.Set(central.HeaderEnqueuedAt, v) })
		if got, ok := central.EnqueuedAtOf(h); ok {
			t.Errorf("enqueued at %q read as %v", v, got)
		}
	}
}

// wireBytes is the size of h as NATS sends and JetStream stores it.
func wireBytes(h nats.Header) int {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// TestCompactFormSize pins what the compact form saves: the headers of a
// typical movement (a controlled one, of a file with an identity) in an
// atomic batch of 1,000, against the full form of the same movement.
func TestCompactFormSize(t *testing.T) {
	at := time.Date(2026, 3, 1, 14, 30, 0, 123456789, time.UTC)
	batch := func(h nats.Header, id string) nats.Header {
		h.Set(central.HeaderBatchID, id)
		h.Set(central.HeaderBatchSeq, "517")
		return h
	}
	full := fullForm()
	for _, k := range []string{central.HeaderFilePrev, central.HeaderFileBase, central.HeaderFileOrigin} {
		full.Del(k)
	}
	full.Set(central.HeaderSeq, "123456")
	full = batch(full, "0190c1b2-7a3e-7c4d-9e8f-0123456789ab") // a UUIDv7
	compact := batch(central.Message{Store: "S0001", Key: testKey, Digest: testDigest, Seq: 123456, EnqueuedAt: at,
		File: central.FileLineage{ID: testFile}}.Msg().Header, "AZDBsno-fE2ejwEjRWeJqw") // the same, base64url
	fb, cb := wireBytes(full), wireBytes(compact)
	t.Logf("headers of a batched movement: full form %d B, compact %d B (%.2f×)", fb, cb, float64(cb)/float64(fb))
	if fb != 434 || cb != 326 {
		t.Errorf("full form %d B, compact %d B; want 434 and 326 (update the README and docs/DESIGN.md with the new sizes)", fb, cb)
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

	m := central.Message{Store: "S0001", Key: "k1", Digest: testDigest, Seq: 1, EnqueuedAt: time.Now(), Payload: []byte(`{"n":1}`)}
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
	if got := central.DigestOf(resp.Header); got != testDigest {
		t.Errorf("direct get: digest %q, want %q (headers %v)", got, testDigest, resp.Header)
	}
	resp, err = nc.RequestWithContext(ctx, central.DirectGetSubject(central.Subject("S0001", "none")), nil)
	if err != nil {
		t.Fatalf("direct get of an empty subject: %v", err)
	}
	if st := resp.Header.Get("Status"); st != "404" {
		t.Errorf("direct get of an empty subject: status %q, want 404", st)
	}
}
