package hl7

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/rxedge/agent/internal/tally"
)

// Reasons the listener refuses a connection or a message, or closes a
// connection: the reason of the HL7_REFUSED log line and the reason label
// of the metric rxedge_intake_hl7_refusals_total.
const (
	ReasonNotAllowed   = "not_allowed"          // the peer is neither loopback nor in intake.hl7.allowed_hosts; closed at once
	ReasonTooMany      = "too_many_connections" // max_connections are open; closed at once
	ReasonPeerLimit    = "too_many_from_peer"   // max_connections_per_peer are open from the address; closed at once
	ReasonShuttingDown = "shutting_down"        // the agent is stopping; closed at once
	ReasonTooLarge     = "too_large"            // a frame over max_message_bytes; closed unanswered
	ReasonIdle         = "idle_timeout"         // no message accepted for idle_timeout; closed
	ReasonAckTimeout   = "ack_timeout"          // an ACK not read within write_timeout; closed
	ReasonMidMessage   = "ended_mid_message"    // the sender closed inside a frame
	ReasonNotTLS       = "not_tls"              // not TLS, on a TLS listener
	ReasonBadCert      = "bad_certificate"      // a client certificate that does not verify with ca_file
	ReasonConnError    = "connection_error"     // any other error on the connection
	ReasonMalformed    = "malformed"            // AR: the message does not decode (100, 102) or has no MSH-10 (101)
	ReasonUnsupported  = "unsupported"          // AR: not RDS^O13 or RDS^O01 (200)
	ReasonInvalid      = "invalid"              // AE: a dispense is wrong, or conflicts with a stored one
	ReasonUnavailable  = "unavailable"          // AR: the agent cannot store now (207)
)

// RefusalReasons are every reason, in the order metrics list them.
var RefusalReasons = []string{
	ReasonNotAllowed, ReasonTooMany, ReasonPeerLimit, ReasonShuttingDown, ReasonTooLarge, ReasonIdle, ReasonAckTimeout,
	ReasonMidMessage, ReasonNotTLS, ReasonBadCert, ReasonConnError,
	ReasonMalformed, ReasonUnsupported, ReasonInvalid, ReasonUnavailable,
}

// Limits of the refusal log. Anyone who can reach the listener can make
// it refuse, as fast as they can connect, so refusals are logged in
// aggregate: each is counted (the metric), and one line per reason and
// peer per RefusalWindow says how many it stands for.
const (
	// RefusalWindow is how often one reason and peer is logged at most.
	RefusalWindow = time.Minute
	// RefusalLinesPerHour bounds the refusal lines of an hour, whatever
	// the flood: past it, refusals are counted into the next hour's first
	// lines.
	RefusalLinesPerHour = 600
	// MaxRefusalCauses bounds the (reason, peer) pairs tallied: the
	// refusals of more peers are tallied under the peer "other".
	MaxRefusalCauses = 256
)

// refusalCause is what refusals are tallied by.
type refusalCause struct {
	reason, peer string
}

// refusalDetail is what a line says beyond the reason and the peer, from
// the latest refusal it stands for: the configured limit crossed, or the
// answer to a refused message (ACK code, the first error's place and
// table 0357 code). Never a value from a message.
type refusalDetail struct {
	limit            int
	ack, where, code string
}

// refusals counts the listener's refusals by reason and logs them in
// aggregate. The counters are atomics in a map built once; the tallies
// are owned by the tally.Reporter.
type refusals struct {
	counts map[string]*atomic.Uint64
	rep    *tally.Reporter[refusalCause, refusalDetail]
	log    *slog.Logger
}

func newRefusals(log *slog.Logger) *refusals {
	r := &refusals{counts: map[string]*atomic.Uint64{}, log: log}
	for _, reason := range RefusalReasons {
		r.counts[reason] = new(atomic.Uint64)
	}
	t := tally.New[refusalCause, refusalDetail](RefusalWindow, RefusalLinesPerHour, nil).
		Bound(MaxRefusalCauses, func(c refusalCause) refusalCause { return refusalCause{c.reason, "other"} })
	r.rep = tally.NewReporter(t, nil, r.emit)
	return r
}

// note counts one refusal and logs those due.
func (r *refusals) note(reason, peer string, d refusalDetail) {
	r.counts[reason].Add(1)
	r.rep.Note(refusalCause{reason, peer}, d)
}

// emit writes one HL7_REFUSED line per report: a warning, except for the
// ordinary ends of a sender's work (idle connections, refused messages,
// which the sender is told of in its ACK).
func (r *refusals) emit(reps []tally.Report[refusalCause, refusalDetail]) {
	for _, rep := range reps {
		level := slog.LevelWarn
		switch rep.Cause.reason {
		case ReasonIdle, ReasonMalformed, ReasonUnsupported, ReasonInvalid:
			level = slog.LevelInfo
		}
		attrs := []slog.Attr{
			slog.String("reason", rep.Cause.reason), slog.String("peer", rep.Cause.peer), slog.Int("count", rep.Count),
			slog.String("first", rep.First.UTC().Format(time.RFC3339)), slog.String("last", rep.Last.UTC().Format(time.RFC3339)),
		}
		d := rep.Detail
		if d.limit > 0 {
			attrs = append(attrs, slog.Int("limit", d.limit))
		}
		if d.ack != "" {
			attrs = append(attrs, slog.String("ack", d.ack), slog.String("where", d.where), slog.String("code", d.code))
		}
		r.log.LogAttrs(context.Background(), level, "HL7_REFUSED", attrs...)
	}
}

// snapshot is the count of refusals by reason since start.
func (r *refusals) snapshot() map[string]uint64 {
	out := make(map[string]uint64, len(r.counts))
	for reason, n := range r.counts {
		out[reason] = n.Load()
	}
	return out
}

// messageRefusal is the reason and detail of a message answered out.Code
// (not AA).
func messageRefusal(out Outcome) (string, refusalDetail) {
	d := refusalDetail{ack: out.Code}
	if out.Err != nil {
		d.where, d.code = out.Err.Loc.String(), out.Err.Code
	}
	switch {
	case out.Code == AE:
		return ReasonInvalid, d
	case d.code == CodeUnsupportedType:
		return ReasonUnsupported, d
	case d.code == CodeInternal:
		return ReasonUnavailable, d
	}
	return ReasonMalformed, d
}

// connRefusal is the reason a connection ended with err while a frame
// was read or an ACK written.
func connRefusal(err error) string {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return ReasonMidMessage
	case errors.As(err, new(tls.RecordHeaderError)):
		return ReasonNotTLS
	case errors.As(err, new(*tls.CertificateVerificationError)):
		return ReasonBadCert
	}
	return ReasonConnError
}

// isTimeout reports whether err is a deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// peerOf names a peer by its address without the port: the refusals of
// one sender are one cause however many connections it opens.
func peerOf(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return "unknown"
	}
	return ap.Addr().Unmap().String()
}
