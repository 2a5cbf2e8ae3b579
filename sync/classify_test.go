package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestClassifyPinsServerTexts provokes every outcome the sender acts on
// from a real server and checks its classification — including the texts
// that tell the meanings of error 10077 apart, which the server gives only
// as text.
func TestClassifyPinsServerTexts(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithStream(central.StreamOptions{MaxMsgs: 3, MaxMsgSize: 4096}), natstest.WithMaxPayload(8192))
	nc := natstest.Connect(t, srv.URL(), nats.ReconnectBufSize(-1))
	js := natstest.JetStream(t, nc)
	ctx := context.Background()
	pub := func(subject, id string, expectZero bool, size int) error {
		m := nats.NewMsg(subject)
		if id != "" {
			m.Header.Set(central.HeaderMsgID, id)
		}
		if expectZero {
			m.Header.Set(central.HeaderExpectLast, "0")
		}
		m.Data = []byte(strings.Repeat("x", size))
		_, err := js.PublishMsg(ctx, m, jetstream.WithRetryAttempts(0))
		return err
	}
	check := func(name string, err error, outcome retry.Outcome, kind string, verify bool) {
		t.Helper()
		v := classify(err)
		if v.outcome != outcome || v.kind != kind || v.verify != verify {
			t.Errorf("%s: %v classified %+v, want %s %s verify=%v", name, err, v, outcome, kind, verify)
		}
	}

	if err := pub("rx.mv.S1.a", "a", true, 10); err != nil {
		t.Fatal(err)
	}
	check("resend with expected sequence 0", pub("rx.mv.S1.a", "a", true, 10), retry.AlreadyStored, "already_stored", true)
	check("other id, same subject, no header", pub("rx.mv.S1.a", "a2", false, 10), retry.AlreadyStored, "already_stored", true)
	check("over the stream's max_msg_size", pub("rx.mv.S1.big", "big", true, 5000), retry.ItemPermanent, "permanent:too_large", false)
	check("over the server's max_payload", pub("rx.mv.S1.huge", "huge", true, 9000), retry.ItemPermanent, "permanent:too_large", false)
	// No answer: blame asks the liveness probe whose failure it is.
	check("no stream for the subject", pub("rx.other.x", "x", false, 10), retry.ItemTransient, "transient:no_responders", false)
	for _, k := range []string{"b", "c"} {
		if err := pub("rx.mv.S1."+k, k, true, 10); err != nil {
			t.Fatal(err)
		}
	}
	check("stream full", pub("rx.mv.S1.d", "d", true, 10), retry.Systemic, "systemic:stream_full", false)

	// Publishing while disconnected, with no reconnect buffer.
	srv.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	_, err := js.PublishMsgAsync(nats.NewMsg("rx.mv.S1.e"))
	check("publish while disconnected", err, retry.Offline, "offline", false)
	check("ack timeout", jetstream.ErrAsyncPublishTimeout, retry.ItemTransient, "transient:timeout", false)
	check("request timeout", context.DeadlineExceeded, retry.ItemTransient, "transient:timeout", false)
}

// TestPermissionTextIsRecognised pins how a permissions violation reaches
// the connection's error handler: the publish itself only times out.
func TestPermissionTextIsRecognised(t *testing.T) {
	got := errors.New(`nats: permissions violation: Permissions Violation for Publish to "rx.mv.S2.k" on connection [7]`)
	if r, _ := Diagnose(got); r != status.ReasonAuthorization {
		t.Fatalf("the server's text is diagnosed %q", r)
	}
	if r, _ := Diagnose(nats.ErrPermissionViolation); r != status.ReasonAuthorization {
		t.Fatalf("the sentinel is diagnosed %q", r)
	}
	if r, _ := Diagnose(errors.New("nats: timeout")); r == status.ReasonAuthorization {
		t.Fatal("a timeout is diagnosed as a permission")
	}
	if v := classify(nats.ErrPermissionViolation); v.outcome != retry.Systemic {
		t.Fatalf("permission violation classified %+v", v)
	}
}

// TestErrorCodesMatchServer: the codes nats.go exports and the ones named
// here after nats-server's table are the server's codes of those names.
func TestErrorCodesMatchServer(t *testing.T) {
	tests := []struct {
		name string
		got  jetstream.ErrorCode
		id   server.ErrorIdentifier
	}{
		{"JSErrCodeStreamWrongLastSequence", jetstream.JSErrCodeStreamWrongLastSequence, server.JSStreamWrongLastSequenceErrF},
		{"JSErrCodeStreamMessageExceedsMaximum", jetstream.JSErrCodeStreamMessageExceedsMaximum, server.JSStreamMessageExceedsMaximumErr},
		{"JSErrCodeStreamNotFound", jetstream.JSErrCodeStreamNotFound, server.JSStreamNotFoundErr},
		{"JSErrCodeJetStreamNotEnabled", jetstream.JSErrCodeJetStreamNotEnabled, server.JSNotEnabledErr},
		{"JSErrCodeJetStreamNotEnabledForAccount", jetstream.JSErrCodeJetStreamNotEnabledForAccount, server.JSNotEnabledForAccountErr},
		{"codeStreamStoreFailed", codeStreamStoreFailed, server.JSStreamStoreFailedF},
		{"codeStreamDuplicateMessageConflict", codeStreamDuplicateMessageConflict, server.JSStreamDuplicateMessageConflict},
		{"codeInsufficientResources", codeInsufficientResources, server.JSInsufficientResourcesErr},
		{"codeAtomicPublishContainsDuplicateMessage", codeAtomicPublishContainsDuplicateMessage, server.JSAtomicPublishContainsDuplicateMessageErr},
		{"codeAtomicPublishIncompleteBatch", codeAtomicPublishIncompleteBatch, server.JSAtomicPublishIncompleteBatchErr},
		{"codeAtomicPublishDisabled", codeAtomicPublishDisabled, server.JSAtomicPublishDisabledErr},
		{"codeAtomicPublishTooManyInflight", codeAtomicPublishTooManyInflight, server.JSAtomicPublishTooManyInflight},
		{"codeAccountResourcesExceeded", codeAccountResourcesExceeded, server.JSAccountResourcesExceededErr},
		{"codeClusterNoPeers", codeClusterNoPeers, server.JSClusterNoPeersErrF},
		{"codeClusterNotAvail", codeClusterNotAvail, server.JSClusterNotAvailErr},
		{"codeClusterNotLeader", codeClusterNotLeader, server.JSClusterNotLeaderErr},
		{"codeMemoryResourcesExceeded", codeMemoryResourcesExceeded, server.JSMemoryResourcesExceededErr},
		{"codeStorageResourcesExceeded", codeStorageResourcesExceeded, server.JSStorageResourcesExceededErr},
		{"codeTempStorageFailed", codeTempStorageFailed, server.JSTempStorageFailedErr},
		{"codeStreamOffline", codeStreamOffline, server.JSStreamOfflineErr},
		{"codeStreamOfflineReason", codeStreamOfflineReason, server.JSStreamOfflineReasonErrF},
		{"codeSubjectInProcess", codeSubjectInProcess, server.JSStreamWrongLastSequenceConstantErr},
	}
	for _, tc := range tests {
		if want := server.ApiErrors[tc.id].ErrCode; uint16(tc.got) != want {
			t.Errorf("%s = %d, the server's code is %d", tc.name, tc.got, want)
		}
	}
}

// TestClassifyAPI pins the verdict of every code the sender acts on.
func TestClassifyAPI(t *testing.T) {
	tests := []struct {
		code        jetstream.ErrorCode
		description string
		outcome     retry.Outcome
		kind        string
	}{
		{10071, "wrong last sequence: 1", retry.AlreadyStored, "already_stored"},
		{10077, "maximum messages per subject exceeded", retry.AlreadyStored, "already_stored"},
		{10077, "maximum messages exceeded", retry.Systemic, "systemic:stream_full"},
		{10158, "duplicate message id is in process", retry.ItemTransient, "transient:in_process"},
		{10164, "wrong last sequence", retry.ItemTransient, "transient:in_process"},
		{10054, "message size exceeds maximum allowed", retry.ItemPermanent, "permanent:too_large"},
		{10059, "stream not found", retry.Systemic, "systemic:stream_missing"},
		{10023, "insufficient resources", retry.Systemic, "systemic:insufficient_resources"},
		{10039, "JetStream not enabled for account", retry.Systemic, "systemic:jetstream_disabled"},
		{10076, "JetStream not enabled", retry.Systemic, "systemic:jetstream_disabled"},
		{10201, "atomic publish batch contains duplicate message id", retry.AlreadyStored, "already_stored"},
		{10176, "atomic publish batch is incomplete", retry.ItemTransient, "transient:batch_incomplete"},
		{10210, "atomic publish too many inflight", retry.ItemTransient, "transient:batch_incomplete"},
		{10174, "atomic publish is disabled", retry.ItemTransient, "transient:batch_not_enabled"},
		{10002, "resource limits exceeded for account", retry.Systemic, "systemic:unavailable"},
		{10005, "no suitable peers for placement", retry.Systemic, "systemic:unavailable"},
		{10008, "JetStream system temporarily unavailable", retry.Systemic, "systemic:unavailable"},
		{10009, "JetStream cluster can not handle request", retry.Systemic, "systemic:unavailable"},
		{10028, "insufficient memory resources available", retry.Systemic, "systemic:unavailable"},
		{10047, "insufficient storage resources available", retry.Systemic, "systemic:unavailable"},
		{10072, "JetStream unable to open temp storage for restore", retry.Systemic, "systemic:unavailable"},
		{10118, "stream is offline", retry.Systemic, "systemic:unavailable"},
		{10194, "stream is offline: reason", retry.Systemic, "systemic:unavailable"},
		{10003, "bad request", retry.ItemTransient, "transient:api_error"},
	}
	for _, tc := range tests {
		v := classify(&jetstream.APIError{ErrorCode: tc.code, Description: tc.description})
		if v.outcome != tc.outcome || v.kind != tc.kind || !v.answered {
			t.Errorf("%d %q: classified %+v, want %s %s, answered", tc.code, tc.description, v, tc.outcome, tc.kind)
		}
	}
}

// TestClassifyInProcessOnACluster pins the "in process" answers of a
// clustered stream (nats-server 2.15): a burst of publishes on one subject
// while the first is still being replicated. With one message id, central
// answers 10158 (the id is in process); with different ids and an
// expected last subject sequence, 10164 (the subject is in process). Both
// are retried soon and uncharged, a bounded number of times (blame).
func TestClassifyInProcessOnACluster(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	leader := c.WaitStreamLeader(t)
	nc := natstest.Connect(t, c.URLs()[leader])
	js := natstest.JetStream(t, nc)
	for _, tc := range []struct {
		name   string
		code   jetstream.ErrorCode
		sameID bool
	}{
		{"same id", codeStreamDuplicateMessageConflict, true},
		{"same subject", codeSubjectInProcess, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen error
			for round := 0; round < 10 && seen == nil; round++ {
				subject := fmt.Sprintf("rx.mv.S1.%s-%d", strings.ReplaceAll(tc.name, " ", "-"), round)
				var futs []jetstream.PubAckFuture
				for i := range 50 {
					m := nats.NewMsg(subject)
					id := subject
					if !tc.sameID {
						id = fmt.Sprintf("%s-%d", subject, i)
						m.Header.Set(central.HeaderExpectLast, "0")
					}
					m.Header.Set(central.HeaderMsgID, id)
					f, err := js.PublishMsgAsync(m, jetstream.WithRetryAttempts(0))
					if err != nil {
						t.Fatal(err)
					}
					futs = append(futs, f)
				}
				for _, f := range futs {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						var api *jetstream.APIError
						if errors.As(err, &api) && api.ErrorCode == tc.code {
							seen = err
						}
					case <-time.After(10 * time.Second):
						t.Fatal("no answer within 10s")
					}
				}
			}
			if seen == nil {
				t.Fatalf("central never answered %d in 10 bursts of 50", tc.code)
			}
			if v := classify(seen); v.outcome != retry.ItemTransient || v.kind != "transient:in_process" || !v.soon || !v.answered {
				t.Fatalf("%v classified %+v, want transient:in_process, soon and answered", seen, v)
			}
		})
	}
}
