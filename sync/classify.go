package sync

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/status"
)

// JetStream API error codes the sender acts on that nats.go does not
// export (it does export 10071, 10054, 10059, 10039 and 10076, used from
// jetstream below). Each is named after its entry in nats-server's
// jetstream_errors_generated.go; TestErrorCodesMatchServer checks them.
const (
	codeStreamStoreFailed                     jetstream.ErrorCode = 10077 // limits: per subject (already stored) or stream full
	codeStreamDuplicateMessageConflict        jetstream.ErrorCode = 10158 // same Nats-Msg-Id still being replicated
	codeInsufficientResources                 jetstream.ErrorCode = 10023
	codeAtomicPublishContainsDuplicateMessage jetstream.ErrorCode = 10201 // atomic batch holds an id already stored
	codeAtomicPublishIncompleteBatch          jetstream.ErrorCode = 10176
	codeAtomicPublishDisabled                 jetstream.ErrorCode = 10174
	codeAtomicPublishTooManyInflight          jetstream.ErrorCode = 10210

	// Central cannot store anything for now.
	codeAccountResourcesExceeded jetstream.ErrorCode = 10002
	codeClusterNoPeers           jetstream.ErrorCode = 10005
	codeClusterNotAvail          jetstream.ErrorCode = 10008
	codeClusterNotLeader         jetstream.ErrorCode = 10009
	codeMemoryResourcesExceeded  jetstream.ErrorCode = 10028
	codeStorageResourcesExceeded jetstream.ErrorCode = 10047
	codeTempStorageFailed        jetstream.ErrorCode = 10072
	codeStreamOffline            jetstream.ErrorCode = 10118
	codeStreamOfflineReason      jetstream.ErrorCode = 10194

	// A subject still in process in a clustered stream (nats-server 2.15:
	// another message on the subject is being proposed).
	codeSubjectInProcess jetstream.ErrorCode = 10164
)

// Texts that distinguish the meanings of error code 10077. The server gives
// them only as text; TestClassifyPinsServerTexts pins them against a real
// server.
const (
	textPerSubjectLimit = "maximum messages per subject exceeded"
	textPermission      = "permissions violation"
)

// Texts of the server's refusals of a connection's credentials. nats.go
// returns them as text (wrapped in its own error type) while the first
// connection is being made; TestDiagnosePinsTexts pins them against a real
// server.
var textsAuth = []string{"authorization violation", "authentication expired", "authentication revoked", "account authentication expired"}

// verdict is what one failed publish means.
type verdict struct {
	outcome retry.Outcome
	kind    string // e.g. "permanent:too_large"; reported, journalled and logged
	// verify: central says the subject is already taken; read it back and
	// compare digests.
	verify bool
	// singly: an atomic batch was refused because of some member; send the
	// members one at a time.
	singly bool
	// soon: retry shortly without charging (central is still replicating
	// this very id or subject), a bounded number of times in a row (blame).
	soon bool
	// noBatch: the stream does not take atomic batches.
	noBatch bool
	// answered: central answered the publish (an API error): it is alive,
	// so a transient failure is this movement's own.
	answered bool
}

// classify maps a publish error to a verdict, by API error code wherever
// the server gives one.
func classify(err error) verdict {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		v := classifyAPI(api)
		v.answered = true
		return v
	}
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return verdict{outcome: retry.ItemPermanent, kind: "permanent:too_large"}
	case errors.Is(err, nats.ErrPermissionViolation):
		return verdict{outcome: retry.Systemic, kind: "systemic:permission"}
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		// Nobody took the publish: the stream is gone, or this subject
		// leads nowhere. Only the liveness probe can tell which (blame).
		return verdict{outcome: retry.ItemTransient, kind: "transient:no_responders"}
	case errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrConnectionDraining), errors.Is(err, nats.ErrStaleConnection),
		errors.Is(err, nats.ErrInvalidConnection):
		return verdict{outcome: retry.Offline, kind: "offline"}
	case errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		// The agent's own window was full: nobody's failure.
		return verdict{outcome: retry.Offline, kind: "local:backpressure"}
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded):
		return verdict{outcome: retry.ItemTransient, kind: "transient:timeout"}
	case errors.Is(err, context.Canceled):
		return verdict{outcome: retry.Offline, kind: "offline"}
	}
	return verdict{outcome: retry.ItemTransient, kind: "transient:error"}
}

// classifyAPI maps an error central answered with.
func classifyAPI(api *jetstream.APIError) verdict {
	switch api.ErrorCode {
	case jetstream.JSErrCodeStreamWrongLastSequence:
		return verdict{outcome: retry.AlreadyStored, kind: "already_stored", verify: true}
	case codeStreamStoreFailed:
		if strings.Contains(api.Description, textPerSubjectLimit) {
			return verdict{outcome: retry.AlreadyStored, kind: "already_stored", verify: true}
		}
		return verdict{outcome: retry.Systemic, kind: "systemic:stream_full"}
	case codeStreamDuplicateMessageConflict, codeSubjectInProcess:
		return verdict{outcome: retry.ItemTransient, kind: "transient:in_process", soon: true}
	case jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return verdict{outcome: retry.ItemPermanent, kind: "permanent:too_large"}
	case jetstream.JSErrCodeStreamNotFound:
		return verdict{outcome: retry.Systemic, kind: "systemic:stream_missing"}
	case codeInsufficientResources:
		return verdict{outcome: retry.Systemic, kind: "systemic:insufficient_resources"}
	case jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
		return verdict{outcome: retry.Systemic, kind: "systemic:jetstream_disabled"}
	case codeAtomicPublishContainsDuplicateMessage:
		return verdict{outcome: retry.AlreadyStored, kind: "already_stored", singly: true}
	case codeAtomicPublishIncompleteBatch, codeAtomicPublishTooManyInflight:
		return verdict{outcome: retry.ItemTransient, kind: "transient:batch_incomplete"}
	case codeAtomicPublishDisabled:
		return verdict{outcome: retry.ItemTransient, kind: "transient:batch_not_enabled", noBatch: true}
	case codeAccountResourcesExceeded, codeClusterNoPeers, codeClusterNotAvail, codeClusterNotLeader,
		codeMemoryResourcesExceeded, codeStorageResourcesExceeded, codeTempStorageFailed, codeStreamOffline, codeStreamOfflineReason:
		return verdict{outcome: retry.Systemic, kind: "systemic:unavailable"}
	}
	return verdict{outcome: retry.ItemTransient, kind: "transient:api_error"}
}

// errNoJetStream: nobody answered a publish, and the server the agent is
// connected to says it has JetStream disabled.
var errNoJetStream = errors.New("sync: the server has JetStream disabled")

// Diagnose says what an error means for reaching or using central: one of
// status.ConnReasons, and a detail for people (the error without nats.go's
// prefix; error texts name hosts and subjects, never credentials or
// payload). It is the one place where connection errors are sorted: by
// type wherever nats.go and the standard library give one, by the server's
// text where they give only that (TestDiagnosePinsTexts).
//
// A "no responders" answer means the server is reachable but nothing takes
// the store's subjects: the sender asks it only of its liveness probe, so
// it is a missing stream (or JetStream off for the account).
func Diagnose(err error) (reason, detail string) {
	var (
		api     *jetstream.APIError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
		unknown x509.UnknownAuthorityError
		verify  *tls.CertificateVerificationError
		dns     *net.DNSError
		ne      net.Error
	)
	detail = strings.TrimPrefix(err.Error(), "nats: ")
	text := strings.ToLower(err.Error())
	switch {
	case errors.As(err, &api):
		detail = fmt.Sprintf("%s (%d)", api.Description, api.ErrorCode)
		switch api.ErrorCode {
		case jetstream.JSErrCodeStreamNotFound:
			return status.ReasonNoStream, detail
		case jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
			return status.ReasonNoJetStream, detail
		}
		return status.ReasonOther, detail
	case errors.Is(err, errNoJetStream):
		return status.ReasonNoJetStream, "the server has JetStream disabled"
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return status.ReasonNoStream, "nothing takes the store's subjects (no responders): the stream is missing or JetStream is off for the account"
	case errors.Is(err, nats.ErrPermissionViolation), strings.Contains(text, textPermission):
		return status.ReasonAuthorization, detail
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired):
		return status.ReasonAuth, detail
	case containsAny(text, textsAuth):
		return status.ReasonAuth, detail
	case errors.As(err, &invalid):
		return status.ReasonTLS, invalid.Error()
	case errors.As(err, &host):
		return status.ReasonTLS, host.Error()
	case errors.As(err, &unknown):
		return status.ReasonTLS, unknown.Error()
	case errors.As(err, &verify):
		return status.ReasonTLS, verify.Error()
	case errors.As(err, &dns):
		return status.ReasonDNS, dns.Error()
	case errors.Is(err, errRefused):
		return status.ReasonRefused, detail
	case errors.Is(err, nats.ErrNoServers):
		// nats.go reports a refused first connection as "no servers";
		// the attempts after it carry the refusal itself.
		return status.ReasonRefused, "connection refused"
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return status.ReasonTimeout, detail
	case errors.Is(err, nats.ErrTLS), errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted):
		return status.ReasonTLS, detail
	}
	return status.ReasonOther, detail
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
