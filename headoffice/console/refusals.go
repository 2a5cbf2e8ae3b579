package console

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rxedge/agent/internal/tally"
)

// Refusals before a user's role is known (no identity, a proxy header
// from an address not configured, a form without its token, a cross-site
// request) are journalled and logged in aggregate: anyone who reaches the
// listener can make the console refuse in a loop, and the journal must
// not grow with the loop. Each cause (kind and who: the user, or the
// peer's address when there is no user) is reported at most once per
// RefusalWindow, with its count, within RefusalReportsPerHour.
const (
	RefusalWindow         = time.Minute
	RefusalReportsPerHour = 120
	maxRefusalCauses      = 1000
)

// Kinds of refusal before the role check.
const (
	refusedIdentity    = "identity"     // no user, an unlisted one, or a proxy header from elsewhere
	refusedToken       = "form_token"   // a state-changing form without the session's token
	refusedCrossOrigin = "cross_origin" // Go's cross-origin protection
)

type refusalCause struct{ kind, who string }

func newRefusalReporter(s *Server) *tally.Reporter[refusalCause, string] {
	t := tally.New[refusalCause, string](RefusalWindow, RefusalReportsPerHour, nil).
		Bound(maxRefusalCauses, func(c refusalCause) refusalCause { return refusalCause{c.kind, "other"} })
	return tally.NewReporter(t, s.o.Clock, s.emitRefusals)
}

// refused counts one refusal of kind by who, with why it was refused.
func (s *Server) refused(kind, who, why string) {
	s.refusals.Note(refusalCause{kind, who}, why)
}

// peer is a request's remote address without its port.
func peer(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// emitRefusals journals and logs one entry per report.
func (s *Server) emitRefusals(reps []tally.Report[refusalCause, string]) {
	for _, rep := range reps {
		e := Entry{At: rep.At, User: rep.Cause.who, Action: "request", Outcome: ActionRefused,
			Detail: fmt.Sprintf("%d request(s) refused (%s: %s) from %s to %s", rep.Count, rep.Cause.kind, rep.Detail,
				rep.First.UTC().Format(time.RFC3339), rep.Last.UTC().Format(time.RFC3339))}
		if err := s.o.Journal.Record(context.Background(), e); err != nil {
			s.o.Logger.Warn("CONSOLE_JOURNAL_FAILED", "action", e.Action, "error", err.Error())
		}
		s.o.Logger.Warn("CONSOLE_REQUEST_REFUSED", "kind", rep.Cause.kind, "who", rep.Cause.who, "count", rep.Count)
	}
}
