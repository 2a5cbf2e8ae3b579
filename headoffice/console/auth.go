package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"slices"
	stdsync "sync"
	"time"

	"github.com/rxedge/agent/central/command"
)

// Roles a console user has (Options.Roles). A user may have several.
const (
	// RoleViewer reads the fleet, the stores and the problems.
	RoleViewer = "viewer"
	// RoleOperator reads what a viewer reads and acts: redrives.
	RoleOperator = "operator"
	// RoleAuditor reads what a viewer reads, the findings, the movement
	// records and their proofs.
	RoleAuditor = "auditor"
)

// Roles lists every role.
var Roles = []string{RoleViewer, RoleOperator, RoleAuditor}

// What a request needs.
type permission int

const (
	permRead  permission = iota // any role
	permAct                     // operator
	permAudit                   // auditor
)

func (p permission) String() string {
	return [...]string{"read", "act", "audit"}[p]
}

// allows reports whether roles grant p.
func allows(roles []string, p permission) bool {
	switch p {
	case permAct:
		return slices.Contains(roles, RoleOperator)
	case permAudit:
		return slices.Contains(roles, RoleAuditor)
	}
	return len(roles) > 0
}

// Authentication modes (Options.Auth).
const (
	// AuthDev is the development mode: a one-time login link printed at
	// the start, on a loopback listener only; its user has every role.
	AuthDev = "dev"
	// AuthClientCert takes the user from the client certificate of a
	// mutual TLS connection: its first e-mail address, else its subject's
	// common name.
	AuthClientCert = "client_cert"
	// AuthProxy takes the user from a trusted reverse proxy's header,
	// accepted only from the proxy's addresses: any other peer is
	// refused, header or not.
	AuthProxy = "proxy"
)

// DevUser is the user of the development mode.
const DevUser = "dev"

// user is who makes a request: their identity and roles.
type user struct {
	ID    string
	Roles []string
}

// Actor is the user as the stores journal them (command.RedriveArgs.Actor).
func (u user) Actor() string { return "console:" + u.ID }

// errNoUser is why a request has no user; the message is shown.
var errNoUser = errors.New("no user")

// identify finds the request's user by the authentication mode. In dev
// mode the user comes from the session (made by the login link). Every
// identity must be listed in the roles.
func (s *Server) identify(r *http.Request) (user, int, string) {
	var id string
	switch s.o.Auth {
	case AuthDev:
		if sess := s.sessions.get(r); sess != nil {
			return sess.user, 0, ""
		}
		return user{}, http.StatusUnauthorized, "open the one-time login link that hq printed at its start (dev mode)"
	case AuthClientCert:
		id = certIdentity(r)
		if id == "" {
			return user{}, http.StatusUnauthorized, "a client certificate issued by the chain's CA is required"
		}
	case AuthProxy:
		if !s.trustedPeer(r) {
			return user{}, http.StatusForbidden, "this console is reached only through its reverse proxy"
		}
		id = r.Header.Get(s.o.ProxyHeader)
		if id == "" {
			return user{}, http.StatusUnauthorized, "the reverse proxy did not say who you are"
		}
	}
	roles := s.o.Roles[id]
	if len(roles) == 0 {
		return user{}, http.StatusForbidden, "you have no role on this console: ask its administrator"
	}
	return user{ID: id, Roles: roles}, 0, ""
}

// certIdentity is the verified client certificate's first e-mail
// address, else its common name; "" without a verified certificate.
func certIdentity(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return ""
	}
	c := r.TLS.VerifiedChains[0][0]
	if len(c.EmailAddresses) > 0 {
		return c.EmailAddresses[0]
	}
	return c.Subject.CommonName
}

// trustedPeer reports whether the request's peer is one of the proxy's
// addresses.
func (s *Server) trustedPeer(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range s.o.ProxyFrom {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ValidIdentity reports whether id may be a console user: what a store
// can journal as the actor console:<id> (command.ValidActor).
func ValidIdentity(id string) bool { return command.ValidActor("console:" + id) }

// session is a browser's session: its user and the token its forms
// carry against cross-site requests.
type session struct {
	user    user
	csrf    string
	expires time.Time
}

// sessions are the console's sessions, in memory: a restart logs every
// browser out. Ownership: the map is behind the mutex.
type sessions struct {
	mu     stdsync.Mutex
	byID   map[string]*session
	ttl    time.Duration
	clock  func() time.Time
	secure bool
	// logins are the dev mode's one-time login tokens, each with its
	// expiry: a token is taken once.
	logins map[string]time.Time
}

// MaxSessions bounds the sessions held: past it the oldest is dropped.
// MaxSessionsPerUser bounds one user's: past it that user's oldest is
// dropped, so that no user (one sending requests without the cookie, as a
// script does) can end another user's session.
const (
	MaxSessions        = 10_000
	MaxSessionsPerUser = 16
)

// cookieName is the session cookie's name; __Host- when served over
// TLS, so that no subdomain can set it.
func (ss *sessions) cookieName() string {
	if ss.secure {
		return "__Host-rxedge-console"
	}
	return "rxedge-console"
}

// get returns the request's live session, nil when it has none.
func (ss *sessions) get(r *http.Request) *session {
	c, err := r.Cookie(ss.cookieName())
	if err != nil {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sess := ss.byID[c.Value]
	if sess == nil || !ss.clock().Before(sess.expires) {
		delete(ss.byID, c.Value)
		return nil
	}
	return sess
}

// start makes a session for u and sets its cookie.
func (ss *sessions) start(w http.ResponseWriter, u user) *session {
	id, csrf := randomToken(), randomToken()
	now := ss.clock()
	sess := &session{user: u, csrf: csrf, expires: now.Add(ss.ttl)}
	ss.mu.Lock()
	mine, oldestMine := 0, ""
	for k, v := range ss.byID {
		switch {
		case !now.Before(v.expires):
			delete(ss.byID, k)
		case v.user.ID == u.ID:
			mine++
			if oldestMine == "" || v.expires.Before(ss.byID[oldestMine].expires) {
				oldestMine = k
			}
		}
	}
	if mine >= MaxSessionsPerUser {
		delete(ss.byID, oldestMine)
	} else if len(ss.byID) >= MaxSessions {
		oldest := ""
		for k, v := range ss.byID {
			if oldest == "" || v.expires.Before(ss.byID[oldest].expires) {
				oldest = k
			}
		}
		delete(ss.byID, oldest)
	}
	ss.byID[id] = sess
	ss.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: ss.cookieName(), Value: id, Path: "/", HttpOnly: true, Secure: ss.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(ss.ttl / time.Second),
	})
	return sess
}

// forUser returns the request's session when it is u's, or starts one:
// with a certificate or a proxy the user comes with each request, and
// the session only carries the CSRF token.
func (ss *sessions) forUser(w http.ResponseWriter, r *http.Request, u user) *session {
	if sess := ss.get(r); sess != nil && sess.user.ID == u.ID && slices.Equal(sess.user.Roles, u.Roles) {
		return sess
	}
	return ss.start(w, u)
}

// newLogin makes a one-time login token valid for ttl.
func (ss *sessions) newLogin(ttl time.Duration) string {
	t := randomToken()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.logins[t] = ss.clock().Add(ttl)
	return t
}

// takeLogin takes a login token: true once, while it is valid.
func (ss *sessions) takeLogin(t string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	exp, ok := ss.logins[t]
	delete(ss.logins, t)
	return ok && ss.clock().Before(exp)
}

// csrfOK reports whether the form's token is the session's.
func csrfOK(sess *session, token string) bool {
	return sess != nil && token != "" && subtle.ConstantTimeCompare([]byte(sess.csrf), []byte(token)) == 1
}

// randomToken is 256 random bits, base64url.
func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// end ends a session.
func (ss *sessions) end(sess *session) {
	if sess == nil {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, v := range ss.byID {
		if v == sess {
			delete(ss.byID, k)
		}
	}
}
