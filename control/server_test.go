package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

const store = "S0042"

func mv(id string, qty int) string {
	return fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":%d,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, id, qty)
}

func newServer(t *testing.T, token string) (*Server, *queue.Queue, *httptest.Server) {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	s := New(Options{Queue: q, StoreID: store, IngestToken: token, MaxRequestBytes: 64 << 10, MaxMovementBytes: 4 << 10})
	hs := httptest.NewServer(s.IngestHandler())
	t.Cleanup(hs.Close)
	return s, q, hs
}

type reply struct {
	code int
	body string
}

func send(t *testing.T, hs *httptest.Server, contentType, body, token string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/movements", strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b)}
}

func pending(t *testing.T, q *queue.Queue) uint64 {
	t.Helper()
	s, err := q.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s.Count(queue.Pending)
}

func TestIngestAnswers(t *testing.T) {
	_, q, hs := newServer(t, "")
	tests := []struct {
		name        string
		contentType string
		body        string
		code        int
		contains    string
		pending     uint64 // held after the request
	}{
		{"one object", "application/json", mv("A", 1), 202, `"key":"` + movement.KeyString(store, "A") + `"`, 1},
		{"duplicate", "application/json", mv("A", 1), 200, `"duplicate":true`, 1},
		{"array", "application/json", "[" + mv("B", 1) + "," + mv("C", 1) + "]", 202, `"accepted":2`, 3},
		{"ndjson", "application/x-ndjson", mv("D", 1) + "\n\n" + mv("E", 1) + "\n", 202, `"accepted":2`, 5},
		{"array with a duplicate", "application/json", "[" + mv("A", 1) + "," + mv("F", 1) + "]", 202, `"duplicates":1`, 6},
		{"conflict", "application/json", mv("A", 2), 409, `"key":"` + movement.KeyString(store, "A") + `"`, 6},
		{"conflict in an array stores nothing", "application/json", "[" + mv("G", 1) + "," + mv("A", 2) + "]", 409, `"item":1`, 6},
		{"invalid item stores nothing", "application/json", "[" + mv("H", 1) + `,{"movement_id":"I"}]`, 400, `"item":1`, 6},
		{"every field error", "application/json", `{"movement_id":"J","colour":"red"}`, 400, `"field":"colour"`, 6},
		{"ndjson line errors", "application/x-ndjson", mv("K", 1) + "\n" + `{"movement_id":"L","quantity":0}`, 400, `"line":2`, 6},
		{"empty", "application/json", "", 400, "empty request", 6},
		{"not json", "application/json", "movement please", 400, "not valid JSON", 6},
		{"movement too large", "application/json", mv("M", 1)[:len(mv("M", 1))-1] + `,"note":"` + strings.Repeat("x", 5000) + `"}`, 413, "larger than 4096 bytes", 6},
		{"request too large", "application/x-ndjson", strings.Repeat(mv("N", 1)+"\n", 1000), 413, "larger than 65536 bytes", 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := send(t, hs, tt.contentType, tt.body, "")
			if r.code != tt.code || !strings.Contains(r.body, tt.contains) {
				t.Fatalf("got %d %s\nwant %d containing %s", r.code, r.body, tt.code, tt.contains)
			}
			if n := pending(t, q); n != tt.pending {
				t.Fatalf("%d held after the request, want %d", n, tt.pending)
			}
		})
	}
	if err := q.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestIngestToken(t *testing.T) {
	const token = "0123456789abcdef0123"
	_, q, hs := newServer(t, token)
	for _, bad := range []string{"", "wrong-token-wrong-token"} {
		if r := send(t, hs, "application/json", mv("A", 1), bad); r.code != 401 || !strings.Contains(r.body, "ingest token") {
			t.Fatalf("token %q: %d %s", bad, r.code, r.body)
		}
	}
	if n := pending(t, q); n != 0 {
		t.Fatalf("%d stored without the token", n)
	}
	if r := send(t, hs, "application/json", mv("A", 1), token); r.code != 202 {
		t.Fatalf("with the token: %d %s", r.code, r.body)
	}
	resp, err := hs.Client().Get(hs.URL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz needs no token: %v %v", resp, err)
	}
	resp, _ = hs.Client().Get(hs.URL + "/v1/status")
	if resp.StatusCode != 401 {
		t.Fatalf("status without the token: %d", resp.StatusCode)
	}
}

func TestDrainingRefusesWith503(t *testing.T) {
	s, q, hs := newServer(t, "")
	s.Drain()
	if r := send(t, hs, "", mv("A", 1), ""); r.code != 503 || !strings.Contains(r.body, "shutting down") {
		t.Fatalf("while draining: %d %s", r.code, r.body)
	}
	resp, _ := hs.Client().Get(hs.URL + "/readyz")
	if resp.StatusCode != 503 {
		t.Fatalf("readyz while draining: %d", resp.StatusCode)
	}
	if n := pending(t, q); n != 0 {
		t.Fatalf("%d stored while draining", n)
	}
}

func TestSubmitEachThroughTheClient(t *testing.T) {
	_, q, _ := newServer(t, "")
	s := New(Options{Queue: q, StoreID: store})
	c := InProcess(s.ControlHandler())
	ctx := context.Background()
	if _, err := c.SubmitEach(ctx, []byte(mv("A", 1)+"\n")); err != nil {
		t.Fatal(err)
	}
	res, err := c.SubmitEach(ctx, []byte(strings.Join([]string{mv("A", 1), mv("A", 2), `{"movement_id":"X"}`, mv("B", 1), mv("B", 2)}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res {
		got = append(got, r.Status)
	}
	want := "duplicate rejected rejected accepted rejected"
	if strings.Join(got, " ") != want {
		b, _ := json.Marshal(res)
		t.Fatalf("statuses %v, want %s\n%s", got, want, b)
	}
	if res[1].Errors[0].Field != "movement_id" || !strings.Contains(res[1].Errors[0].Error, "different content") {
		t.Fatalf("conflict reported as %+v", res[1].Errors)
	}
	if n := pending(t, q); n != 2 {
		t.Fatalf("%d held, want 2", n)
	}
	st, err := c.Status(ctx)
	if err != nil || st.Counts.Pending.Total != 2 || st.StoreID != store {
		t.Fatalf("status %+v %v", st, err)
	}
}

// TestRoutesByListener: the ingest listener serves the intake, status,
// health and metrics; the metrics listener only metrics and health; the
// operator's routes only the control socket, which only administrators
// can reach (DESIGN P7).
func TestRoutesByListener(t *testing.T) {
	_, q, _ := newServer(t, "")
	s := New(Options{Queue: q, StoreID: store, Metrics: metrics.New(q)})
	ingest, ctl, met := s.IngestHandler(), s.ControlHandler(), s.MetricsHandler()
	tests := []struct {
		method, path        string
		onIngest, onMetrics bool
	}{
		{"POST", "/v1/movements", true, false},
		{"GET", "/v1/status", true, false},
		{"GET", "/healthz", true, true},
		{"GET", "/readyz", true, true},
		{"GET", "/metrics", true, true},
		{"GET", "/v1/dlq", false, false},
		{"GET", "/v1/dlq/export", false, false},
		{"GET", "/v1/dlq/summary", false, false},
		{"GET", "/v1/dlq/%20", false, false},
		{"POST", "/v1/dlq/redrive", false, false},
		{"POST", "/v1/dlq/purge", false, false},
		{"GET", "/v1/audit", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			if got := serveCode(ctl, tt.method, tt.path); got == http.StatusNotFound {
				t.Errorf("control socket: got %d, want the route served", got)
			}
			got := serveCode(ingest, tt.method, tt.path)
			if served := got != http.StatusNotFound; served != tt.onIngest {
				t.Errorf("ingest listener: got %d, want served %v", got, tt.onIngest)
			}
			got = serveCode(met, tt.method, tt.path)
			if served := got != http.StatusNotFound && got != http.StatusMethodNotAllowed; served != tt.onMetrics {
				t.Errorf("metrics listener: got %d, want served %v", got, tt.onMetrics)
			}
		})
	}
	if n := len(s.routes()); n != len(tests) {
		t.Errorf("got %d routes, want %d: add the new route to this table", n, len(tests))
	}
}

// TestRefusalsAreCounted: a missing or wrong token, on either listener,
// and a refused submission each count under a bounded cause.
func TestRefusalsAreCounted(t *testing.T) {
	_, q, _ := newServer(t, "")
	m := metrics.New(q)
	tok := strings.Repeat("i", 20)
	s := New(Options{Queue: q, StoreID: store, Metrics: m, IngestToken: tok, MetricsToken: strings.Repeat("m", 20)})
	do := func(h http.Handler, method, path, token, body string) int {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Host = "127.0.0.1:8717"
		if method == http.MethodPost {
			r.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	ingest, met := s.IngestHandler(), s.MetricsHandler()
	for _, c := range []struct {
		h           http.Handler
		path, token string
		body        string
		code        int
		method      string
	}{
		{ingest, "/v1/movements", "", "{}", 401, "POST"},
		{ingest, "/v1/movements", "nope", "{}", 401, "POST"},
		{ingest, "/v1/movements", tok, "not json", 400, "POST"},
		{met, "/metrics", "", "", 401, "GET"},
		{met, "/metrics", strings.Repeat("m", 20), "", 200, "GET"},
		{met, "/healthz", "", "", 200, "GET"},
	} {
		if got := do(c.h, c.method, c.path, c.token, c.body); got != c.code {
			t.Errorf("%s %s with token %q: got %d, want %d", c.method, c.path, c.token, got, c.code)
		}
	}
	var text strings.Builder
	if err := InProcess(s.ControlHandler()).Metrics(context.Background(), &text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`rxedge_refused_tokens_total{cause="missing",listener="ingest"} 1`,
		`rxedge_refused_tokens_total{cause="wrong",listener="ingest"} 1`,
		`rxedge_refused_tokens_total{cause="missing",listener="metrics"} 1`,
		`rxedge_refused_tokens_total{cause="wrong",listener="metrics"} 0`,
		`rxedge_ingest_refused_requests_total{cause="invalid"} 1`,
		`rxedge_ingest_refused_requests_total{cause="disk_full"} 0`,
	} {
		if !strings.Contains(text.String(), want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func serveCode(h http.Handler, method, path string) int {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, strings.NewReader("{}"))
	req.Host = "127.0.0.1:8717"
	h.ServeHTTP(rec, req)
	return rec.Code
}

func TestClientSubmitReadyMetrics(t *testing.T) {
	_, q, _ := newServer(t, "")
	s := New(Options{Queue: q, StoreID: store, Metrics: metrics.New(q)})
	c := InProcess(s.ControlHandler())
	ctx := context.Background()
	sub, err := c.Submit(ctx, []byte("["+mv("A", 1)+","+mv("B", 1)+"]"), "application/json")
	if err != nil || sub.Accepted != 2 || len(sub.Results) != 2 || sub.Results[0].Key != movement.KeyString(store, "A") {
		t.Fatalf("submit: %+v, %v", sub, err)
	}
	var ae *APIError
	if _, err := c.Submit(ctx, []byte(mv("A", 2)), "application/json"); !errors.As(err, &ae) || ae.Code != http.StatusConflict || ae.Body.Key != movement.KeyString(store, "A") {
		t.Fatalf("conflicting submit: %v, want a 409 naming the key", err)
	}
	if n := pending(t, q); n != 2 {
		t.Fatalf("%d held, want 2", n)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	s.Drain()
	if err := c.Ready(ctx); !errors.As(err, &ae) || ae.Code != http.StatusServiceUnavailable {
		t.Fatalf("ready while draining: %v, want a 503", err)
	}
	var text strings.Builder
	if err := c.Metrics(ctx, &text); err != nil || !strings.Contains(text.String(), "rxedge_ingest_movements_total") {
		t.Fatalf("metrics: %v\n%s", err, text.String())
	}
}

func TestNewFillsTheDefaults(t *testing.T) {
	_, q, _ := newServer(t, "")
	o := New(Options{Queue: q, StoreID: store}).opts
	if o.MaxRequestBytes != DefaultMaxRequestBytes || o.MaxMovementBytes != DefaultMaxMovementBytes ||
		o.Clock == nil || o.Logger == nil || o.Status == nil || o.DLQ == nil {
		t.Errorf("got %+v, want every default filled", o)
	}
}

// TestIngestRefusesWhatTheFormularyRefuses: a unit other than the
// formulary's is 422 naming the formulary's unit (400 when the request
// has other problems too); a bare 10-digit NDC is 400 saying it is
// ambiguous unless the formulary resolves it; the same movement in
// another spelling is a duplicate; ?each=1 refuses a unit item by item.
func TestIngestRefusesWhatTheFormularyRefuses(t *testing.T) {
	s, q, hs := newServer(t, "")
	s.opts.Formulary = intake.Formulary{"00591-0540-01": {Schedule: "CII", Unit: "EA"}}
	one := func(id, ndc, unit string) string {
		return fmt.Sprintf(`{"movement_id":%q,"type":"receive","ndc":%q,"quantity":100,"unit":%q,"occurred_at":"2026-03-01T09:30:00Z","schedule":"CII"}`, id, ndc, unit)
	}
	for _, c := range []struct {
		name, body string
		code       int
		contains   string
	}{
		{"other unit", one("R1", "00591-0540-01", "ML"), 422, "must be EA, the unit the formulary gives this NDC"},
		{"other unit and a bad field", "[" + one("R1", "00591-0540-01", "ML") + "," + one("R2", "x", "EA") + "]", 400, "must be EA"},
		{"ambiguous", one("R3", "1234567890", "EA"), 400, "bare 10-digit NDC, which is ambiguous"},
		{"resolved", one("R4", "0591054001", "EA"), 202, `"duplicate":false`},
		{"another spelling", one("R4", "00591-0540-01", "EA"), 200, `"duplicate":true`},
	} {
		r := send(t, hs, "application/json", c.body, "")
		if r.code != c.code || !strings.Contains(r.body, c.contains) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, r.code, r.body, c.code, c.contains)
		}
	}
	if n := pending(t, q); n != 1 {
		t.Fatalf("%d pending, want 1", n)
	}
	r := send(t, hs, "application/json", "["+one("R5", "00591-0540-01", "GM")+"]", "")
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/movements?each=1", strings.NewReader("["+one("R5", "00591-0540-01", "GM")+","+one("R6", "00591054001", "EA")+"]"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if r.code != 422 || resp.StatusCode != 200 || !strings.Contains(string(b), `"status":"rejected"`) || !strings.Contains(string(b), `"status":"accepted"`) {
		t.Fatalf("each: %d %s", resp.StatusCode, b)
	}
}
