package natsconn

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/rxedge/agent/internal/redact"
)

// urlIdentity is the identity a server URL carries in its user
// information: a user and a password, or, without a password, a token (as
// nats.go reads it).
type urlIdentity struct {
	user, password, token string
}

// parseServers reads a comma-separated list of server URLs as nats.go does
// (each trimmed, empty ones dropped, nats:// when there is no scheme) and
// returns it without user information, and the identity that information
// held: one for the whole list (a list whose URLs carry different ones is
// refused). An entry that is not a URL is an ErrSetting that shows it
// without credentials and says why, never with a piece of what it could
// not read.
func parseServers(list, from string) (string, *urlIdentity, error) {
	var (
		out []string
		id  *urlIdentity
	)
	// A comma in a password splits its URL (as nats.go splits it): what
	// an error shows of one part is scrubbed of what the list holds.
	fail := func(format string, args ...any) error {
		return invalid("%s", redact.Text(fmt.Sprintf(format, args...), redact.Secrets(list)...))
	}
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		bare := !strings.Contains(e, "://")
		raw := e
		if bare {
			raw = "nats://" + e
		}
		u, err := url.Parse(raw)
		if err != nil {
			return "", nil, fail("the server URL %s (from %s) is not a URL: %v", redact.URL(e), from, redact.ParseError(err, raw))
		}
		if u.Host == "" {
			return "", nil, fail("the server URL %s (from %s) names no host: give one such as nats://central.example:4222", redact.URL(e), from)
		}
		// A server URL is a scheme, a host and a port (and a path, over a
		// websocket). nats.go ignores the rest, where a mistyped URL
		// (nats:/user:password@host) can put what was meant as its user
		// information.
		path := u.Path != "" && u.Path != "/" && (u.Scheme != "ws" && u.Scheme != "wss" || strings.ContainsAny(u.Path, "@:"))
		if u.Opaque != "" || path || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
			return "", nil, fail("the server URL %s (from %s) has more than a host and port: give one such as nats://central.example:4222", redact.URL(e), from)
		}
		if this := identityOf(u.User); this != nil {
			if id != nil && *id != *this {
				return "", nil, invalid("the server URLs (from %s) carry different credentials: give one identity for them all", from)
			}
			id = this
		}
		u.User = nil
		s := u.String()
		if bare {
			s = strings.TrimPrefix(s, "nats://")
		}
		out = append(out, s)
	}
	return strings.Join(out, ","), id, nil
}

// identityOf is the identity of a URL's user information; nil for none.
func identityOf(ui *url.Userinfo) *urlIdentity {
	if ui == nil || ui.String() == "" {
		return nil
	}
	if pw, ok := ui.Password(); ok {
		return &urlIdentity{user: ui.Username(), password: pw}
	}
	return &urlIdentity{token: ui.Username()}
}
