package control

import (
	"net"
	"net/http"
	"slices"
	"strings"
)

// sameHost refuses, with 403, the requests a web page could make the
// store PC's browser send to the ingest listener: a Host that is not a
// loopback name or address, the listener's own host or one of
// AllowedHosts (DNS rebinding), and requests with an Origin header or a
// cross-site Sec-Fetch-Site (cross-site request forgery), unless the
// origin is one of AllowedOrigins. Dispensing software does not send
// Origin; browsers always do on a cross-origin POST.
func (s *Server) sameHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			writeJSON(w, http.StatusForbidden, ErrorBody{Error: "the Host header names no address of this agent's ingest listener: use 127.0.0.1 or localhost, or list the name in ingest.allowed_hosts"})
			return
		}
		origin := r.Header.Get("Origin")
		site := r.Header.Get("Sec-Fetch-Site")
		fromBrowser := origin != "" || (site != "" && site != "same-origin" && site != "none")
		if fromBrowser && (origin == "" || !slices.Contains(s.opts.AllowedOrigins, origin)) {
			writeJSON(w, http.StatusForbidden, ErrorBody{Error: "requests from web pages are refused: list the page's origin in ingest.allowed_origins to allow it"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a request's Host names this listener.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(strings.ToLower(host), "[]"), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	if lh, _, err := net.SplitHostPort(s.opts.IngestListen); err == nil {
		if ip := net.ParseIP(lh); lh != "" && (ip == nil || !ip.IsUnspecified()) && strings.EqualFold(strings.Trim(lh, "[]"), host) {
			return true
		}
	}
	return slices.ContainsFunc(s.opts.AllowedHosts, func(a string) bool { return strings.EqualFold(a, host) })
}
