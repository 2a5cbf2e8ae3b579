package console

import (
	"context"
	"net/http"
	"strings"
)

// contentSecurityPolicy allows nothing but the console's own style sheet
// and forms posted to itself: no script at all, inline or not, and no
// framing.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// MaxFormBytes bounds a form posted to the console.
const MaxFormBytes = 1 << 20

// request is what a route handler knows of its request: its user and
// session.
type request struct {
	user user
	sess *session
}

type handler func(w http.ResponseWriter, r *http.Request, rq *request)

// routes is the console's handler table, behind its headers and Go's
// cross-origin protection.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /static/console.css", serveCSS)
	mux.HandleFunc("GET /login", s.login)
	mux.Handle("GET /{$}", http.RedirectHandler("/fleet", http.StatusSeeOther))
	mux.Handle("GET /fleet", s.route(permRead, s.fleetPage))
	mux.Handle("GET /stores/{store}", s.route(permRead, s.storePage))
	mux.Handle("POST /stores/{store}/redrive", s.route(permAct, s.redriveStore))
	mux.Handle("GET /bulk", s.route(permAct, s.bulkPreview))
	mux.Handle("POST /bulk", s.route(permAct, s.bulkRedrive))
	mux.Handle("GET /problems", s.route(permRead, s.problemsPage))
	mux.Handle("GET /findings", s.route(permAudit, s.findingsPage))
	mux.Handle("GET /records", s.route(permAudit, s.recordsPage))
	mux.Handle("POST /records", s.route(permAudit, s.recordsSearch))
	mux.Handle("GET /records/{store}/{key}", s.route(permAudit, s.movementPage))
	mux.Handle("GET /records/{store}/{key}/proof", s.route(permAudit, s.proofDownload))
	mux.Handle("GET /journal", s.route(permRead, s.journalPage))
	mux.Handle("POST /logout", s.route(permRead, s.logout))
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.refused(refusedCrossOrigin, peer(r), "a cross-origin request")
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	return securityHeaders(cop.Handler(mux))
}

// securityHeaders sets the headers every answer carries.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if r.TLS != nil {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

// route authenticates a request, gives it a session, checks its
// permission and, for a state-changing one, its CSRF token, before h.
// An action refused for the user's role is journalled.
func (s *Server) route(p permission, h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		u, code, why := s.identify(r)
		if code != 0 {
			s.refused(refusedIdentity, peer(r), http.StatusText(code))
			s.errorPage(w, r, nil, code, why)
			return
		}
		var sess *session
		if s.o.Auth == AuthDev {
			sess = s.sessions.get(r)
		} else {
			sess = s.sessions.forUser(w, r, u)
		}
		rq := &request{user: u, sess: sess}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
			if err := r.ParseForm(); err != nil {
				s.errorPage(w, r, rq, http.StatusBadRequest, "the form could not be read")
				return
			}
			if !csrfOK(sess, r.PostForm.Get("csrf")) {
				s.refused(refusedToken, u.ID, "a form without the session's token")
				s.errorPage(w, r, rq, http.StatusForbidden, "the form's token is missing or stale: reload the page and try again")
				return
			}
		}
		if !allows(u.Roles, p) {
			if r.Method == http.MethodPost {
				s.journalRefusal(r.Context(), u, r)
			}
			s.errorPage(w, r, rq, http.StatusForbidden, "your role ("+strings.Join(u.Roles, ", ")+") does not allow this: it needs "+p.need())
			return
		}
		h(w, r, rq)
	})
}

// need says which role a permission needs.
func (p permission) need() string {
	switch p {
	case permAct:
		return RoleOperator
	case permAudit:
		return RoleAuditor
	}
	return "a role"
}

// journalRefusal records an action refused for the user's role.
func (s *Server) journalRefusal(ctx context.Context, u user, r *http.Request) {
	e := Entry{At: s.o.Clock(), User: u.ID, Roles: u.Roles, Action: actionOf(r), Outcome: ActionRefused, Detail: "the user's role does not allow it"}
	if st := r.PathValue("store"); st != "" {
		e.Stores = []string{st}
	}
	if err := s.o.Journal.Record(ctx, e); err != nil {
		s.o.Logger.Warn("CONSOLE_JOURNAL_FAILED", "action", e.Action, "error", err.Error())
	}
	s.o.Logger.Warn("CONSOLE_ACTION_REFUSED", "user", u.ID, "action", e.Action)
}

// actionOf names a state-changing request's action.
func actionOf(r *http.Request) string {
	switch {
	case strings.HasSuffix(r.URL.Path, "/redrive"):
		return "redrive"
	case r.URL.Path == "/bulk":
		return "bulk_redrive"
	}
	return strings.Trim(r.URL.Path, "/")
}

// login takes the dev mode's one-time link: it starts a session and
// sends the browser on without the token.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if s.o.Auth != AuthDev || !s.sessions.takeLogin(r.URL.Query().Get("t")) {
		s.errorPage(w, r, nil, http.StatusUnauthorized, "this login link is not valid: it works once, for a few minutes; restart hq run --dev for a new one")
		return
	}
	s.sessions.start(w, user{ID: DevUser, Roles: s.o.Roles[DevUser]})
	http.Redirect(w, r, "/fleet", http.StatusSeeOther)
}

// logout ends the session.
func (s *Server) logout(w http.ResponseWriter, r *http.Request, rq *request) {
	s.sessions.end(rq.sess)
	http.SetCookie(w, &http.Cookie{Name: s.sessions.cookieName(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.sessions.secure, SameSite: http.SameSiteStrictMode})
	s.render(w, r, rq, http.StatusOK, "message", &messageData{Frame: Frame{Title: "Logged out"}, Title: "Logged out", Text: "The session has ended."})
}
