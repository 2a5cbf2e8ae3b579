package sync

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/status"
)

func TestDiagnose(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: errRefused}}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"refused dial", refused, status.ReasonRefused},
		{"refused first connection", nats.ErrNoServers, status.ReasonRefused},
		{"unknown host", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "central.invalid", IsNotFound: true}}, status.ReasonDNS},
		{"dial timeout", &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, status.ReasonTimeout},
		{"no greeting in time", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, status.ReasonTimeout},
		{"nats timeout", nats.ErrTimeout, status.ReasonTimeout},
		{"expired certificate", fmt.Errorf("%w: %w", nats.ErrTLS, &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}}), status.ReasonTLS},
		{"wrong host", fmt.Errorf("%w: %w", nats.ErrTLS, x509.HostnameError{Certificate: &x509.Certificate{}, Host: "127.0.0.1"}), status.ReasonTLS},
		{"unknown authority", fmt.Errorf("%w: %w", nats.ErrTLS, x509.UnknownAuthorityError{}), status.ReasonTLS},
		{"client certificate refused", fmt.Errorf("%w: %w", nats.ErrTLS, errors.New("remote error: tls: certificate required")), status.ReasonTLS},
		{"server wants TLS", nats.ErrSecureConnRequired, status.ReasonTLS},
		{"authorization violation (sentinel)", nats.ErrAuthorization, status.ReasonAuth},
		{"authorization violation (server text)", errors.New("nats: Authorization Violation"), status.ReasonAuth},
		{"authentication expired", nats.ErrAuthExpired, status.ReasonAuth},
		{"permissions violation (sentinel)", nats.ErrPermissionViolation, status.ReasonAuthorization},
		{"permissions violation (server text)", errors.New(`nats: permissions violation: Permissions Violation for Publish to "rx.mv.S0001.k"`), status.ReasonAuthorization},
		{"stream not found", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}, status.ReasonNoStream},
		{"no responders", nats.ErrNoResponders, status.ReasonNoStream},
		{"JetStream not enabled", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled}, status.ReasonNoJetStream},
		{"JetStream not enabled for account", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeJetStreamNotEnabledForAccount}, status.ReasonNoJetStream},
		{"server without JetStream", fmt.Errorf("%w: %w", errNoJetStream, nats.ErrNoResponders), status.ReasonNoJetStream},
		{"stream full", &jetstream.APIError{ErrorCode: codeStreamStoreFailed, Description: "maximum messages exceeded"}, status.ReasonOther},
		{"anything else", errors.New("nats: maximum control line exceeded"), status.ReasonOther},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, detail := Diagnose(tc.err)
			if got != tc.want || detail == "" {
				t.Errorf("Diagnose(%v) = %q, %q; want %q with a detail", tc.err, got, detail, tc.want)
			}
		})
	}
}

// TestDiagnosePinsTexts: the refusals nats.go hands over as the server's
// text — credentials while the first connection is made, permissions
// through the asynchronous error handler — are diagnosed from a real
// server's words.
func TestDiagnosePinsTexts(t *testing.T) {
	dir := t.TempDir()
	conf := writeFile(t, dir, "server.conf", permissionsConf(filepath.Join(dir, "js"), -1, false))
	h, err := hub.Start(hub.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "js"), ConfigFile: conf, Provision: streams.Provision,
		ConnectOptions: []nats.Option{nats.UserInfo("admin", "admin-pass")}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()

	_, err = nats.Connect(h.URL(), nats.UserInfo("S0001", "wrong"))
	if r, _ := Diagnose(err); err == nil || r != status.ReasonAuth {
		t.Errorf("wrong password: %v diagnosed %q, want %q", err, r, status.ReasonAuth)
	}

	async := make(chan error, 1)
	nc, err := nats.Connect(h.URL(), nats.UserInfo("S0001", "store-pass"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case async <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("rx.mv.S0001.k", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-async:
		if r, _ := Diagnose(err); r != status.ReasonAuthorization {
			t.Errorf("publish denied: %v diagnosed %q, want %q", err, r, status.ReasonAuthorization)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no permissions violation within 10s")
	}
}

func TestDiagnosisLogsChangesOnly(t *testing.T) {
	d := diagnosis{logEvery: time.Minute}
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	steps := []struct {
		at       time.Duration
		reason   string // "" clears
		log      bool
		unlogged int
	}{
		{0, status.ReasonRefused, true, 0},
		{time.Second, status.ReasonRefused, false, 0}, // a retry
		{2 * time.Second, status.ReasonAuth, true, 0},
		{3 * time.Second, status.ReasonRefused, false, 0}, // flapping: within logEvery
		{4 * time.Second, status.ReasonAuth, false, 0},
		{5 * time.Second, "", false, 0},
		{6 * time.Second, status.ReasonAuth, false, 0},
		{2 * time.Minute, status.ReasonRefused, true, 3},
		{2*time.Minute + time.Second, status.ReasonTLS, true, 0},
		{2*time.Minute + 2*time.Second, status.ReasonAuthorization, true, 0},
		{2*time.Minute + 3*time.Second, status.ReasonTimeout, false, 0}, // a denied publish times out
		{2*time.Minute + 4*time.Second, status.ReasonTLS, false, 0},
	}
	for i, s := range steps {
		if s.reason == "" {
			d.clear()
			if d.problem() != nil {
				t.Fatalf("step %d: problem %+v after clear", i, d.problem())
			}
			continue
		}
		log, unlogged := d.see(t0.Add(s.at), s.reason, "detail", "nats://central:4222")
		if log != s.log || unlogged != s.unlogged {
			t.Errorf("step %d (%s at %s): log %v unlogged %d, want %v %d", i, s.reason, s.at, log, unlogged, s.log, s.unlogged)
		}
		want := s.reason
		if want == status.ReasonTimeout {
			want = status.ReasonAuthorization
		}
		if p := d.problem(); p == nil || p.Reason != want {
			t.Errorf("step %d: problem %+v, want %s", i, p, want)
		}
	}
	if p := d.problem(); !p.Since.Equal(t0.Add(2*time.Minute + 4*time.Second)) {
		t.Errorf("since %v, want the time of the last change", p.Since)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://S0001:secret@central.example:4222": "nats://central.example:4222",
		"tls://tok3n@central.example:4222":         "tls://central.example:4222",
		"central.example:4222":                     "nats://central.example:4222",
		"":                                         "",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// testCA is a certificate authority made up for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // PEM of the CA certificate
}

func newCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, t.TempDir(), name+".pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	return testCA{cert: cert, key: key, file: file}
}

// issue makes a server certificate valid from notBefore to notAfter for
// the given host names and addresses.
func (ca testCA) issue(t *testing.T, notBefore, notAfter time.Time, names []string, ips []net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "central"},
		NotBefore: notBefore, NotAfter: notAfter, DNSNames: names, IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// startServer runs a plain nats-server on a free loopback port until the
// test ends, and returns its URL.
func startServer(t *testing.T, o *server.Options) string {
	t.Helper()
	o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready within 10s")
	}
	return fmt.Sprintf("nats://%s", s.Addr())
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestCentralProblems: each reason the agent cannot reach or use central,
// provoked against a real server (real TLS with certificates made here),
// shows as its own reason in the status document, in exactly one log line
// however often the agent retries, and in the metrics; no credential shows
// anywhere.
func TestCentralProblems(t *testing.T) {
	const secret = "s3cret-pass-word"
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	tlsServer := func(t *testing.T, cert tls.Certificate) string {
		t.Helper()
		u := startServer(t, &server.Options{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, TLSTimeout: 5})
		return strings.Replace(u, "nats://", "tls://", 1)
	}
	usersConf := func(t *testing.T, publish string) string {
		t.Helper()
		dir := t.TempDir()
		return writeFile(t, dir, "server.conf", fmt.Sprintf(`
listen: 127.0.0.1:-1
jetstream { store_dir: %q, sync_interval: always }
accounts { RX { jetstream: enabled, users: [
  { user: admin, password: admin-pass },
  { user: S0001, password: %q, permissions: { publish: { allow: [%s] }, subscribe: { allow: ["_INBOX_S0001.>"] } } }
] } }
`, filepath.Join(dir, "js"), secret, publish))
	}
	startConf := func(t *testing.T, conf string) *hub.Hub {
		t.Helper()
		dir := t.TempDir()
		h, err := hub.Start(hub.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "js"), ConfigFile: conf, Provision: streams.Provision,
			ConnectOptions: []nats.Option{nats.UserInfo("admin", "admin-pass")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Shutdown)
		return h
	}
	allowed := `"rx.mv.S0001.>", "rx.status.S0001", "$JS.API.DIRECT.GET.RX_MOVEMENTS.rx.mv.S0001.>"`

	tests := []struct {
		name   string
		reason string
		detail string // in the problem's detail
		// setup returns the agent's options' servers, the server URL the
		// problem must name, and whether to submit a movement (problems of
		// publishing show only when there is something to publish).
		setup func(t *testing.T, o *Options) (server string, send bool)
	}{
		{"wrong password", status.ReasonAuth, "authorization violation", func(t *testing.T, o *Options) (string, bool) {
			h := startConf(t, usersConf(t, allowed))
			_, port, _ := net.SplitHostPort(h.Addr())
			o.NATS.Servers = []string{"nats://S0001:wrong-" + secret + "@127.0.0.1:" + port}
			return "nats://127.0.0.1:" + port, false
		}},
		{"expired certificate", status.ReasonTLS, "expired", func(t *testing.T, o *Options) (string, bool) {
			ca := newCA(t, "ca")
			u := tlsServer(t, ca.issue(t, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour), nil, loopback))
			o.NATS.Servers, o.NATS.CAFile = []string{u}, ca.file
			return u, false
		}},
		{"wrong host name", status.ReasonTLS, "127.0.0.1", func(t *testing.T, o *Options) (string, bool) {
			ca := newCA(t, "ca")
			u := tlsServer(t, ca.issue(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), []string{"central.example"}, nil))
			o.NATS.Servers, o.NATS.CAFile = []string{u}, ca.file
			return u, false
		}},
		{"unknown authority", status.ReasonTLS, "unknown authority", func(t *testing.T, o *Options) (string, bool) {
			ca, other := newCA(t, "ca"), newCA(t, "other")
			u := tlsServer(t, ca.issue(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), nil, loopback))
			o.NATS.Servers, o.NATS.CAFile = []string{u}, other.file
			return u, false
		}},
		{"unknown host", status.ReasonDNS, "central.rxedge.invalid", func(t *testing.T, o *Options) (string, bool) {
			o.NATS.Servers = []string{"nats://central.rxedge.invalid:4222"}
			return o.NATS.Servers[0], false
		}},
		{"refused port", status.ReasonRefused, "refused", func(t *testing.T, o *Options) (string, bool) {
			o.NATS.Servers = []string{"nats://" + closedPort(t)}
			return o.NATS.Servers[0], false
		}},
		{"publish denied", status.ReasonAuthorization, "Permissions Violation", func(t *testing.T, o *Options) (string, bool) {
			h := startConf(t, usersConf(t, `"rx.status.S0001", "$JS.API.DIRECT.GET.RX_MOVEMENTS.rx.mv.S0001.>"`))
			o.NATS.Servers = []string{h.URL()}
			return h.URL(), true
		}},
		{"stream missing", status.ReasonNoStream, "no responders", func(t *testing.T, o *Options) (string, bool) {
			h, err := hub.Start(hub.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h.Shutdown)
			o.NATS.Servers = []string{h.URL()}
			return h.URL(), true
		}},
		{"no JetStream", status.ReasonNoJetStream, "JetStream disabled", func(t *testing.T, o *Options) (string, bool) {
			u := startServer(t, &server.Options{})
			o.NATS.Servers = []string{u}
			return u, true
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := testOptions(t)
			o.NATS.ReconnectWait, o.NATS.ReconnectJitter = 100*time.Millisecond, 100*time.Millisecond
			if tc.reason == status.ReasonAuthorization {
				o.NATS.User, o.NATS.Password = "S0001", secret
			}
			want, send := tc.setup(t, &o)
			r := startRig(t, o, func(s *Options) { s.NoBatch = true })
			if send {
				r.enqueue(0, 1)
			}

			// Several failures with the same reason, so that a line per
			// retry would show.
			deadline := time.Now().Add(60 * time.Second)
			for {
				c := r.e.Connection()
				if c.Problem != nil && c.Problem.Reason == tc.reason && scrape(t, r, "rxedge_central_errors_total", tc.reason) >= 3 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 60s: connection %+v, problem %+v, %v failures counted; want 3 failures with reason %s",
						c, c.Problem, scrape(t, r, "rxedge_central_errors_total", tc.reason), tc.reason)
				}
				time.Sleep(20 * time.Millisecond)
			}

			c := r.e.Connection()
			p := c.Problem
			if p.Server != want || !strings.Contains(strings.ToLower(p.Detail), strings.ToLower(tc.detail)) || p.Since == nil {
				t.Errorf("problem %+v, want server %s and a detail with %q", p, want, tc.detail)
			}
			doc, _ := json.Marshal(c)
			if strings.Contains(string(doc), secret) {
				t.Errorf("the status document shows the password: %s", doc)
			}

			var lines []map[string]any
			sc := bufio.NewScanner(strings.NewReader(r.logs.String()))
			for sc.Scan() {
				var l map[string]any
				if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == "CENTRAL_PROBLEM" {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || lines[0]["reason"] != tc.reason || lines[0]["server"] != want {
				t.Errorf("CENTRAL_PROBLEM lines %v, want exactly one with reason %s and server %s", lines, tc.reason, want)
			}
			if strings.Contains(r.logs.String(), secret) {
				t.Error("the log shows the password")
			}

			for _, reason := range status.ConnReasons {
				want := 0.0
				if reason == tc.reason {
					want = 1
				}
				if got := scrape(t, r, "rxedge_connection_problem", reason); got != want {
					t.Errorf("rxedge_connection_problem{reason=%q} = %v, want %v", reason, got, want)
				}
			}
		})
	}
}

// scrape reads one series of the agent's metrics: name{reason="…"}.
func scrape(t *testing.T, r *rig, name, reason string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	r.m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	prefix := fmt.Sprintf("%s{reason=%q} ", name, reason)
	for line := range strings.Lines(rec.Body.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no series %s{reason=%q}", name, reason)
	return 0
}
