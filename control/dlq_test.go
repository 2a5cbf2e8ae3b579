package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/dlqtest"
)

// opFixture is a real data file in a temporary directory, with movements
// quarantined by the test, for the operator's routes.
type opFixture struct {
	clk *dlqtest.Clock
	q   *queue.Queue
}

func newOpFixture(t *testing.T) *opFixture {
	t.Helper()
	clk := dlqtest.NewClock()
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: store, Clock: clk.Now})
	if err != nil {
		t.Fatalf("queue.Open: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return &opFixture{clk: clk, q: q}
}

// quarantine puts each movement (its JSON) in the quarantine with reason,
// one minute apart, and returns their keys, oldest quarantine first.
func (f *opFixture) quarantine(t *testing.T, reason string, movements ...string) []string {
	t.Helper()
	keys := make([]string, len(movements))
	for i, m := range movements {
		keys[i] = dlqtest.Quarantine(t, f.q, f.clk.Now(), m, reason)
		f.clk.Add(time.Minute)
	}
	return keys
}

// many returns n movements with ids prefix-0001, ...
func many(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = mv(fmt.Sprintf("%s-%04d", prefix, i+1), 1)
	}
	return out
}

// controlHandler is the control socket's handler over q.
func controlHandler(q *queue.Queue, svc *dlq.Service) http.Handler {
	return New(Options{Queue: q, StoreID: q.StoreID(), DLQ: svc}).ControlHandler()
}

// serve sends one request to a handler.
func serve(h http.Handler, method, path, body string, header map[string]string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func readDetails(t *testing.T, data []byte) []dlq.Detail {
	t.Helper()
	var out []dlq.Detail
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var d dlq.Detail
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		out = append(out, d)
	}
	return out
}

func TestDLQRefusals(t *testing.T) {
	f := newOpFixture(t)
	keys := f.quarantine(t, "", mv("A", 1))
	h := controlHandler(f.q, nil)
	zero := strings.Repeat("0", 32)
	tests := []struct {
		name, method, path, body string
		code                     int
		contains                 string
	}{
		{"list bad reason", "GET", "/v1/dlq?reason=too+large", "", 400, "reason (--reason)"},
		{"list bad since", "GET", "/v1/dlq?since=yesterday", "", 400, "since (--since)"},
		{"list bad until", "GET", "/v1/dlq?until=soon", "", 400, "until (--until)"},
		{"list bad limit", "GET", "/v1/dlq?limit=ten", "", 400, "limit (--limit)"},
		{"show unknown key", "GET", "/v1/dlq/" + zero, "", 404, "holds no such movement"},
		{"show no such movement", "GET", "/v1/dlq/xyz", "", 404, `no quarantined movement has the movement_id "xyz"`},
		{"show blank", "GET", "/v1/dlq/%20", "", 400, `key (KEY) is required`},
		{"redrive empty", "POST", "/v1/dlq/redrive", `{}`, 400, "selection"},
		{"redrive no reason", "POST", "/v1/dlq/redrive", `{"all":true}`, 400, "reason_text (--reason-text)"},
		{"redrive bad spread", "POST", "/v1/dlq/redrive", `{"all":true,"reason_text":"x","spread":"soon"}`, 400, "spread (--spread)"},
		{"redrive unknown field", "POST", "/v1/dlq/redrive", `{"all":true,"reason_text":"x","everything":true}`, 400, "everything"},
		{"redrive not json", "POST", "/v1/dlq/redrive", `all please`, 400, "body"},
		{"redrive bad key", "POST", "/v1/dlq/redrive", `{"keys":["k-1"],"reason_text":"x"}`, 400, `"k-1" is not a movement key`},
		{"purge unconfirmed", "POST", "/v1/dlq/purge", `{"keys":["` + keys[0] + `"],"reason_text":"x"}`, 400, "confirm (--yes)"},
		{"purge no reason", "POST", "/v1/dlq/purge", `{"keys":["` + keys[0] + `"],"confirm":true}`, 400, "reason_text (--reason-text)"},
		{"purge no keys", "POST", "/v1/dlq/purge", `{"reason_text":"x","confirm":true}`, 400, "keys"},
		{"export bad filter", "GET", "/v1/dlq/export?limit=-1", "", 400, "limit"},
		{"audit bad since", "GET", "/v1/audit?since=last+week", "", 400, "since (--since)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(h, tt.method, tt.path, tt.body, nil)
			var body ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("answer %d is not an ErrorBody: %s", rec.Code, rec.Body)
			}
			if rec.Code != tt.code || !strings.Contains(body.Error, tt.contains) {
				t.Fatalf("got %d %q, want %d containing %q", rec.Code, body.Error, tt.code, tt.contains)
			}
		})
	}
	if s := dlqtest.State(t, f.q, keys[0]); s != queue.Quarantined {
		t.Errorf("the movement is %s after refused requests", s)
	}
	rec := serve(h, "GET", "/v1/dlq/"+zero, "", nil)
	var body ErrorBody
	json.Unmarshal(rec.Body.Bytes(), &body)
	if body.Key != zero {
		t.Errorf("404 names key %q, want %s", body.Key, zero)
	}
}

func TestDLQListShowAuditThroughTheClient(t *testing.T) {
	f := newOpFixture(t)
	keys := append(f.quarantine(t, "permanent:too_large", mv("A", 1)), f.quarantine(t, "exhausted:timeout", mv("B", 1))...)
	c := InProcess(controlHandler(f.q, nil))
	ctx := context.Background()

	list, err := c.DLQList(ctx, dlq.Filter{Reason: "exhausted"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Key != keys[1] || list.Matched != 1 {
		t.Errorf("list = %+v", list)
	}
	d, err := c.DLQShow(ctx, keys[0], false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Key != keys[0] || d.Payload != nil {
		t.Errorf("show = %+v", d)
	}
	if d, err = c.DLQShow(ctx, keys[0], true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d.Payload), `"movement_id":"A"`) {
		t.Errorf("show with payload = %s", d.Payload)
	}
	var ae *APIError
	if _, err := c.DLQShow(ctx, strings.Repeat("1", 32), false); !errors.As(err, &ae) || ae.Code != 404 {
		t.Errorf("show unknown: %v, want a 404", err)
	}
	audit, err := c.Audit(ctx, dlq.AuditFilter{Actions: []string{"quarantine"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(audit.Events) != 2 || audit.Events[0].Keys[0] != keys[0] {
		t.Errorf("audit = %+v", audit)
	}
}

func TestDLQRedriveStreamsProgressAndRecordsTheActor(t *testing.T) {
	f := newOpFixture(t)
	keys := f.quarantine(t, "", many("stream", 5)...)
	h := controlHandler(f.q, dlq.NewWithOptions(f.q, dlq.Options{Chunk: 2}))
	rec := serve(h, "POST", "/v1/dlq/redrive", `{"all":true,"reason_text":"central is back","spread":"1m"}`,
		map[string]string{"Accept": "application/x-ndjson", ActorHeader: "local:frank"})
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("answer %d %s: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var progress []dlq.Progress
	var result *dlq.RedriveResult
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		var ev RedriveEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		switch {
		case ev.Progress != nil:
			progress = append(progress, *ev.Progress)
		case ev.Result != nil:
			result = ev.Result
		}
		if ev.Error != "" {
			t.Fatalf("error line: %+v", ev)
		}
	}
	if want := []dlq.Progress{{Done: 2, Total: 5}, {Done: 4, Total: 5}, {Done: 5, Total: 5}}; !slices.Equal(progress, want) {
		t.Errorf("progress %v, want %v", progress, want)
	}
	if result == nil || len(result.Redriven) != len(keys) {
		t.Fatalf("result = %+v", result)
	}
	for _, e := range dlqtest.Events(t, f.q, queue.ActionRedrive) {
		if e.Actor != "local:frank" || e.Reason != "central is back" {
			t.Errorf("journal event %+v", e)
		}
	}

	// A refusal before any work keeps its status code.
	rec = serve(h, "POST", "/v1/dlq/redrive", `{"all":true}`, map[string]string{"Accept": "application/x-ndjson"})
	if rec.Code != 400 {
		t.Errorf("streamed refusal: %d %s", rec.Code, rec.Body)
	}
}

func TestDLQExportStreamsAndJournals(t *testing.T) {
	f := newOpFixture(t)
	keys := f.quarantine(t, "", many("export", 3)...)
	h := controlHandler(f.q, nil)
	rec := serve(h, "GET", "/v1/dlq/export?dest=out.jsonl&reason_text=inspection", "", map[string]string{ActorHeader: "local:gina"})
	if rec.Code != 200 || rec.Header().Get(CountHeader) != "3" {
		t.Fatalf("answer %d, count %q: %s", rec.Code, rec.Header().Get(CountHeader), rec.Body)
	}
	ds := readDetails(t, rec.Body.Bytes())
	if len(ds) != 3 || ds[0].Key != keys[0] || ds[0].Payload == nil {
		t.Errorf("exported %+v", ds)
	}
	if tr := rec.Result().Trailer.Get(ErrorTrailer); tr != "" {
		t.Errorf("error trailer %q", tr)
	}
	evs := dlqtest.Events(t, f.q, queue.ActionExport)
	if len(evs) != 1 || evs[0].Actor != "local:gina" || evs[0].Reason != "inspection" || evs[0].Detail["dest"] != "out.jsonl" || evs[0].Count != 3 {
		t.Errorf("journal = %+v", evs)
	}
}

func TestDLQReadOnlyFileIsServiceUnavailableForWrites(t *testing.T) {
	f := newOpFixture(t)
	keys := f.quarantine(t, "", mv("A", 1))
	ro := dlqtest.ReopenReadOnly(t, f.q)
	h := controlHandler(ro, nil)
	tests := []struct {
		name, method, path, body string
		code                     int
	}{
		{"list", "GET", "/v1/dlq", "", 200},
		{"show", "GET", "/v1/dlq/" + keys[0], "", 200},
		{"audit", "GET", "/v1/audit", "", 200},
		{"dry run", "POST", "/v1/dlq/redrive", `{"all":true,"reason_text":"x","dry_run":true}`, 200},
		{"redrive", "POST", "/v1/dlq/redrive", `{"all":true,"reason_text":"x"}`, 503},
		{"export", "GET", "/v1/dlq/export", "", 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(h, tt.method, tt.path, tt.body, nil)
			if rec.Code != tt.code {
				t.Fatalf("got %d %s, want %d", rec.Code, rec.Body, tt.code)
			}
			if tt.code == 503 && !strings.Contains(rec.Body.String(), "read-only") {
				t.Errorf("503 does not say why: %s", rec.Body)
			}
		})
	}
}

// TestClientRedriveExportPurge runs the operator's writes through the
// typed client: the redrive's progress stream, the export's count and
// lines, the purge.
func TestClientRedriveExportPurge(t *testing.T) {
	f := newOpFixture(t)
	keys := f.quarantine(t, "", many("client", 5)...)
	c := InProcess(controlHandler(f.q, dlq.NewWithOptions(f.q, dlq.Options{Chunk: 2})))
	ctx := context.Background()

	ex, err := c.DLQExport(ctx, dlq.ExportRequest{Filter: dlq.Filter{Limit: 4}, Dest: "stdout"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(ex)
	ex.Close()
	if ds := readDetails(t, data); err != nil || ex.Count != 4 || len(ds) != 4 || ds[3].Key != keys[3] {
		t.Errorf("export: count %d, %d lines, %v; want 4, 4, nil", ex.Count, len(ds), err)
	}

	var progress []dlq.Progress
	res, err := c.DLQRedrive(ctx, dlq.RedriveRequest{
		Selection: dlq.Selection{Keys: keys[:3]}, ReasonText: "retry", Spread: time.Minute,
		Progress: func(done, total int) { progress = append(progress, dlq.Progress{Done: done, Total: total}) },
	})
	if err != nil || len(res.Redriven) != 3 {
		t.Fatalf("redrive: %+v, %v", res, err)
	}
	if want := []dlq.Progress{{Done: 2, Total: 3}, {Done: 3, Total: 3}}; !slices.Equal(progress, want) {
		t.Errorf("progress %v, want %v", progress, want)
	}
	var ae *APIError
	if _, err := c.DLQRedrive(ctx, dlq.RedriveRequest{Selection: dlq.Selection{All: true}}); !errors.As(err, &ae) || ae.Code != 400 {
		t.Errorf("redrive without a reason: %v, want a 400", err)
	}

	pr, err := c.DLQPurge(ctx, dlq.PurgeRequest{Keys: keys[3:], ReasonText: "duplicates", Confirm: true})
	if err != nil || len(pr.Purged) != 2 || pr.ExportFile == "" {
		t.Fatalf("purge: %+v, %v", pr, err)
	}
	if s := dlqtest.State(t, f.q, keys[4]); s != queue.Purged {
		t.Errorf("purged movement is %s", s)
	}
}

// TestExportErrorTrailer: an export that fails after it started ends with
// an *ExportError carrying the agent's message, after the whole lines.
func TestExportErrorTrailer(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(CountHeader, "2")
		w.Header().Set("Trailer", ErrorTrailer)
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "{}\n")
		w.Header().Set(ErrorTrailer, "dlq: export: 1 of 2 movements written: disk I/O")
	})
	ex, err := InProcess(h).DLQExport(context.Background(), dlq.ExportRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	data, err := io.ReadAll(ex)
	var xe *ExportError
	if string(data) != "{}\n" || !errors.As(err, &xe) || !strings.Contains(xe.Msg, "1 of 2") || ex.Count != 2 {
		t.Fatalf("got %q, %v, count %d; want one line, an *ExportError, count 2", data, err, ex.Count)
	}
}

// TestNoPatientDataInTheAnswers checks DESIGN P6 on the operator's
// routes: a marker in rx_ref and note appears in a shown payload and in
// exports, and in no list, show or audit answer.
func TestNoPatientDataInTheAnswers(t *testing.T) {
	const marker = "PATIENT-MARKER-7731"
	f := newOpFixture(t)
	withRef := func(id, extra string) string { return strings.TrimSuffix(mv(id, 1), "}") + extra + "}" }
	keys := f.quarantine(t, "",
		withRef("A", `,"rx_ref":"RX-`+marker+`","note":"for `+marker+`","schedule":"CII"`),
		withRef("B", `,"rx_ref":"RX-`+marker+`-2"`),
		withRef("C", `,"note":"`+marker+`"`),
	)
	h := controlHandler(f.q, nil)
	c := InProcess(h)
	ctx := context.Background()

	var seen []string // everything that must not hold the marker
	add := func(what, s string) { seen = append(seen, what+": "+s) }
	add("GET /v1/dlq", serve(h, "GET", "/v1/dlq", "", nil).Body.String())
	add("GET /v1/dlq/{key}", serve(h, "GET", "/v1/dlq/"+keys[0], "", nil).Body.String())

	// Positive controls: the payload is there when asked for.
	d, err := c.DLQShow(ctx, keys[0], true)
	if err != nil || !strings.Contains(string(d.Payload), marker) {
		t.Fatalf("show with payload lacks the marker: %v", err)
	}
	ex, err := c.DLQExport(ctx, dlq.ExportRequest{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(ex)
	ex.Close()
	if err != nil || !strings.Contains(string(data), marker) {
		t.Fatalf("export lacks the marker: %v", err)
	}
	if _, err := c.DLQPurge(ctx, dlq.PurgeRequest{Keys: keys[1:], ReasonText: "duplicates", Confirm: true}); err != nil {
		t.Fatal(err)
	}
	add("GET /v1/audit", serve(h, "GET", "/v1/audit", "", nil).Body.String())

	for _, s := range seen {
		if strings.Contains(s, marker) {
			t.Errorf("patient data outside the payload in %s", s)
		}
	}
}
