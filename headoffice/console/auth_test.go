package console_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/syncbuf"
)

func newLogger(b *syncbuf.Buffer) *slog.Logger { return slog.New(slog.NewJSONHandler(b, nil)) }

// seed puts a summary of store into the fleet view.
func seed(t *testing.T, hub *natstest.Server, s command.Summary) {
	t.Helper()
	js := natstest.JetStream(t, natstest.Connect(t, hub.URL()))
	b, _ := json.Marshal(s)
	if _, err := js.Publish(t.Context(), "$KV.RX_FLEET."+s.StoreID, b); err != nil {
		t.Fatal(err)
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// session opens /fleet as user and returns the session's cookie and
// CSRF token.
func session(t *testing.T, h *hqConsole, user string) (*http.Cookie, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.url+"/fleet", nil)
	req.Header.Set(console.DefaultProxyHeader, user)
	resp, err := clientFrom("").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := csrfField.FindSubmatch(b)
	if resp.StatusCode != 200 || m == nil || len(resp.Cookies()) == 0 {
		t.Fatalf("GET /fleet as %s: %d, csrf %v, cookies %v", user, resp.StatusCode, m != nil, resp.Cookies())
	}
	return resp.Cookies()[0], string(m[1])
}

// post posts a form as user with the session's cookie.
func post(t *testing.T, h *hqConsole, user string, c *http.Cookie, path string, form url.Values, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(console.DefaultProxyHeader, user)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if c != nil {
		req.AddCookie(c)
	}
	resp, err := clientFrom("").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// journal reads the console's journal file.
func journal(t *testing.T, h *hqConsole) []console.Entry {
	t.Helper()
	f, err := os.Open(h.journal)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []console.Entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e console.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// TestProxyHeaderOnlyFromTheProxy: the proxy's header names the user
// only from the proxy's address: from another peer the request is
// refused, header or not, and a user with no role is refused.
func TestProxyHeaderOnlyFromTheProxy(t *testing.T) {
	hub := natstest.StartHub(t)
	h := startConsole(t, hub, ledgertest.OperatorSigner(t), nil, nil)
	for _, tt := range []struct {
		name, user, from string
		want             int
	}{
		{"a listed user through the proxy", "victor@chain.example", "127.0.0.1", 200},
		{"a forged header from another peer", "alice@chain.example", "127.0.0.2", 403},
		{"no header from another peer", "", "127.0.0.2", 403},
		{"no header through the proxy", "", "127.0.0.1", 401},
		{"a user with no role", "mallory@chain.example", "127.0.0.1", 403},
		{"a store's id as the user", "S0001", "127.0.0.1", 403},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, h, tt.user, tt.from, "/fleet")
			if code != tt.want {
				t.Errorf("GET /fleet: %d, want %d\n%s", code, tt.want, body)
			}
			if tt.want != 200 && strings.Contains(body, `id="fleet"`) {
				t.Error("a refused request got the fleet table")
			}
		})
	}
}

// TestStateChangesNeedTokenRoleAndOrigin: a state-changing request
// without the session's CSRF token, from another origin, or by a viewer
// is refused before anything is sent; the viewer's is journalled. Every
// answer carries the security headers.
func TestStateChangesNeedTokenRoleAndOrigin(t *testing.T) {
	hub := natstest.StartHub(t)
	seed(t, hub, command.Summary{StoreID: "S0001", State: status.Online, Quarantined: 1, GeneratedAt: time.Now(), Version: "1"})
	h := startConsole(t, hub, ledgertest.OperatorSigner(t), nil, nil)
	waitFor(t, "the index to hold S0001", func() bool { _, ok := h.index.Get("S0001"); return ok })
	form := func(csrf string) url.Values {
		return url.Values{"csrf": {csrf}, "key": {strings.Repeat("a", 32)}, "reason": {"limit raised"}}
	}
	oc, ocsrf := session(t, h, "olga@chain.example")
	vc, vcsrf := session(t, h, "victor@chain.example")
	for _, tt := range []struct {
		name   string
		user   string
		c      *http.Cookie
		form   url.Values
		hdr    map[string]string
		want   int
		reason string
	}{
		{"no token", "olga@chain.example", oc, form(""), nil, 403, "token"},
		{"another session's token", "olga@chain.example", oc, form(vcsrf), nil, 403, "token"},
		{"no session", "olga@chain.example", nil, form(ocsrf), nil, 403, "token"},
		{"cross-site", "olga@chain.example", oc, form(ocsrf), map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "cross-origin"},
		{"another origin", "olga@chain.example", oc, form(ocsrf), map[string]string{"Origin": "http://evil.example"}, 403, "cross-origin"},
		{"a viewer", "victor@chain.example", vc, form(vcsrf), nil, 403, "does not allow"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := post(t, h, tt.user, tt.c, "/stores/S0001/redrive", tt.form, tt.hdr)
			if code != tt.want || !strings.Contains(strings.ToLower(body), tt.reason) {
				t.Errorf("POST: %d %s; want %d mentioning %q", code, body, tt.want, tt.reason)
			}
		})
	}
	var refused, asked int
	for _, e := range journal(t, h) {
		switch {
		case e.Outcome == console.ActionRefused && e.User == "victor@chain.example" && e.Action == "redrive" && e.Stores[0] == "S0001":
			refused++
		case e.Outcome == console.ActionAsked:
			asked++
		}
	}
	if refused != 1 || asked != 0 {
		t.Errorf("journal: %d refusals of victor, %d actions asked; want 1 and 0\n%+v", refused, asked, journal(t, h))
	}
	req, _ := http.NewRequest(http.MethodGet, h.url+"/fleet", nil)
	req.Header.Set(console.DefaultProxyHeader, "victor@chain.example")
	resp, err := clientFrom("").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for k, want := range map[string]string{
		"Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		"X-Frame-Options":         "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	c := resp.Cookies()[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie %+v: want HttpOnly and SameSite=Strict", c)
	}
}

// TestDevLogin: the dev mode's link logs in once, only while it is
// valid; without it nothing is served; and the dev mode refuses a
// listener off loopback.
func TestDevLogin(t *testing.T) {
	hub := natstest.StartHub(t)
	now := time.Now()
	clock := func() time.Time { return now }
	h := startConsole(t, hub, ledgertest.OperatorSigner(t), nil, func(o *console.Options) {
		o.Auth, o.ProxyFrom, o.Roles, o.Clock = console.AuthDev, nil, nil, clock
	})
	addr := strings.TrimPrefix(h.url, "http://")
	tcp, _ := net.ResolveTCPAddr("tcp", addr)
	link := h.srv.LoginURL(tcp)
	u, _ := url.Parse(link)
	if code, _ := get(t, h, "", "", "/fleet"); code != 401 {
		t.Errorf("without logging in: %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodGet, h.url+u.RequestURI(), nil)
	resp, err := clientFrom("").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/fleet" || len(resp.Cookies()) != 1 {
		t.Fatalf("the login link: %d to %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	req, _ = http.NewRequest(http.MethodGet, h.url+"/fleet", nil)
	req.AddCookie(resp.Cookies()[0])
	if resp2, err := clientFrom("").Do(req); err != nil || resp2.StatusCode != 200 {
		t.Fatalf("the session: %v %v", resp2, err)
	}
	if code, _ := get(t, h, "", "", u.RequestURI()); code != 401 {
		t.Errorf("the link a second time: %d, want 401", code)
	}
	late, _ := url.Parse(h.srv.LoginURL(tcp))
	now = now.Add(console.DefaultLoginTTL + time.Second)
	if code, _ := get(t, h, "", "", late.RequestURI()); code != 401 {
		t.Errorf("an expired link: %d, want 401", code)
	}
	o := consoleOptions()
	o.Auth, o.Listen = console.AuthDev, "0.0.0.0:7480"
	o.Index, o.Client, o.Journal = h.index, nil, nil
	if _, err := console.New(o); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("dev mode off loopback: %v, want refused", err)
	}
}

// TestOptionsRefuse: every problem with the options at once.
func TestOptionsRefuse(t *testing.T) {
	for name, o := range map[string]console.Options{
		"off loopback in the clear": {Listen: "0.0.0.0:7480", Auth: console.AuthClientCert},
		"proxy without addresses":   {Auth: console.AuthProxy},
		"no such mode":              {Auth: "basic"},
		"a user with markup":        {Auth: console.AuthProxy, ProxyFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Roles: map[string][]string{"<b>": {"viewer"}}},
		"no such role":              {Auth: console.AuthProxy, ProxyFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Roles: map[string][]string{"a": {"root"}}},
	} {
		if _, err := console.New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestClientCertificates: with mutual TLS the user is the certificate's
// e-mail address or common name; a store's certificate from the same CA
// has no role and is refused; without a certificate there is no
// connection.
func TestClientCertificates(t *testing.T) {
	ca, caKey := newCA(t)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	serverCert := issue(t, ca, caKey, "console", "", true)
	hub := natstest.StartHub(t)
	h := startConsole(t, hub, ledgertest.OperatorSigner(t), []fleet.RosterStore{{Store: "S0001"}}, func(o *console.Options) {
		o.Auth, o.ProxyFrom = console.AuthClientCert, nil
		o.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	})
	client := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}
	}
	alice := issue(t, ca, caKey, "Alice", "alice@chain.example", false)
	store := issue(t, ca, caKey, "S0001", "", false)
	for name, tt := range map[string]struct {
		cert *tls.Certificate
		want int
	}{"an operator's certificate": {&alice, 200}, "a store's certificate": {&store, 403}} {
		resp, err := client(tt.cert).Get(h.url + "/fleet")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: %d, want %d", name, resp.StatusCode, tt.want)
		}
		if c := resp.Cookies(); tt.want == 200 && (len(c) == 0 || !strings.HasPrefix(c[0].Name, "__Host-") || !c[0].Secure) {
			t.Errorf("%s: cookies %+v, want a __Host- cookie, Secure", name, c)
		}
	}
	if resp, err := client(nil).Get(h.url + "/fleet"); err == nil {
		resp.Body.Close()
		t.Errorf("without a certificate: %d, want no connection", resp.StatusCode)
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chain CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn, email string, server bool) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	if email != "" {
		tmpl.EmailAddresses = []string{email}
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestRefusalsBeforeTheRoleAreJournalled: a form without its token, a
// forged proxy header from an address not configured and a cross-site
// request are each on the journal, and a loop of them adds one entry per
// cause and window, not one per request.
func TestRefusalsBeforeTheRoleAreJournalled(t *testing.T) {
	hub := natstest.StartHub(t)
	h := startConsole(t, hub, ledgertest.OperatorSigner(t), nil, nil)
	oc, ocsrf := session(t, h, "olga@chain.example")
	form := url.Values{"csrf": {""}, "key": {strings.Repeat("a", 32)}, "reason": {"limit raised"}}
	for range 30 {
		post(t, h, "olga@chain.example", oc, "/stores/S0001/redrive", form, nil)
		get(t, h, "alice@chain.example", "127.0.0.2", "/fleet")
		post(t, h, "olga@chain.example", oc, "/stores/S0001/redrive",
			url.Values{"csrf": {ocsrf}, "key": {strings.Repeat("a", 32)}, "reason": {"x"}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	}
	entries := map[string]int{}
	for _, e := range journal(t, h) {
		if e.Outcome == console.ActionRefused && e.Action == "request" {
			if m := refusalKind.FindStringSubmatch(e.Detail); m != nil {
				entries[e.User+" "+m[1]]++
			}
		}
	}
	for _, want := range []string{"olga@chain.example form_token", "127.0.0.2 identity", "127.0.0.1 cross_origin"} {
		if entries[want] != 1 {
			t.Errorf("journal entries of %q: %d, want 1 for 30 refusals (all: %v)", want, entries[want], entries)
		}
	}
}

var refusalKind = regexp.MustCompile(`refused \((\w+):`)
