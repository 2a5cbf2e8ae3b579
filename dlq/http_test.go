package dlq

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/queue"
)

// serve sends one request to the control handler.
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

func TestHTTPRefusals(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A"})
	h := handler(f.q, f.svc)
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
		{"show not a key", "GET", "/v1/dlq/xyz", "", 400, `"xyz" is not a movement key`},
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
			var body control.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("answer %d is not an ErrorBody: %s", rec.Code, rec.Body)
			}
			if rec.Code != tt.code || !strings.Contains(body.Error, tt.contains) {
				t.Fatalf("got %d %q, want %d containing %q", rec.Code, body.Error, tt.code, tt.contains)
			}
		})
	}
	if s := f.state(t, keys[0]); s != queue.Quarantined {
		t.Errorf("the movement is %s after refused requests", s)
	}
	rec := serve(h, "GET", "/v1/dlq/"+zero, "", nil)
	var body control.ErrorBody
	json.Unmarshal(rec.Body.Bytes(), &body)
	if body.Key != zero {
		t.Errorf("404 names key %q, want %s", body.Key, zero)
	}
}

func TestHTTPListShowAuditThroughTheClient(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A", reason: "permanent:too_large"}, spec{id: "B", reason: "exhausted:timeout"})
	c := control.InProcess(handler(f.q, f.svc))
	ctx := context.Background()

	var list ListResult
	if err := c.Do(ctx, "GET", "/v1/dlq?"+(Filter{Reason: "exhausted"}).Query().Encode(), nil, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Key != keys[1] || list.Matched != 1 {
		t.Errorf("list = %+v", list)
	}
	var d Detail
	if err := c.Do(ctx, "GET", "/v1/dlq/"+keys[0], nil, &d); err != nil {
		t.Fatal(err)
	}
	if d.Key != keys[0] || d.Payload != nil {
		t.Errorf("show = %+v", d)
	}
	if err := c.Do(ctx, "GET", "/v1/dlq/"+keys[0]+"?payload=1", nil, &d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d.Payload), `"movement_id":"A"`) {
		t.Errorf("show with payload = %s", d.Payload)
	}
	var ae *control.APIError
	if err := c.Do(ctx, "GET", "/v1/dlq/"+strings.Repeat("1", 32), nil, &d); !errors.As(err, &ae) || ae.Code != 404 {
		t.Errorf("show unknown: %v, want a 404", err)
	}
	var audit AuditResult
	if err := c.Do(ctx, "GET", "/v1/audit?"+(AuditFilter{Actions: []string{"quarantine"}}).Query().Encode(), nil, &audit); err != nil {
		t.Fatal(err)
	}
	if len(audit.Events) != 2 || audit.Events[0].Keys[0] != keys[0] {
		t.Errorf("audit = %+v", audit)
	}
}

func TestHTTPRedriveStreamsProgressAndRecordsTheActor(t *testing.T) {
	f := newFixture(t)
	f.svc.chunk = 2
	keys := f.quarantine(t, many("stream", 5)...)
	h := handler(f.q, f.svc)
	rec := serve(h, "POST", "/v1/dlq/redrive", `{"all":true,"reason_text":"central is back","spread":"1m"}`,
		map[string]string{"Accept": "application/x-ndjson", control.ActorHeader: "local:frank"})
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("answer %d %s: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var progress []Progress
	var result *RedriveResult
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
	if want := []Progress{{2, 5}, {4, 5}, {5, 5}}; !slices.Equal(progress, want) {
		t.Errorf("progress %v, want %v", progress, want)
	}
	if result == nil || len(result.Redriven) != len(keys) {
		t.Fatalf("result = %+v", result)
	}
	for _, e := range f.events(t, queue.ActionRedrive) {
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

func TestHTTPExportStreamsAndJournals(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, many("export", 3)...)
	h := handler(f.q, f.svc)
	rec := serve(h, "GET", "/v1/dlq/export?dest=out.jsonl&reason_text=inspection", "", map[string]string{control.ActorHeader: "local:gina"})
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
	evs := f.events(t, queue.ActionExport)
	if len(evs) != 1 || evs[0].Actor != "local:gina" || evs[0].Reason != "inspection" || evs[0].Detail["dest"] != "out.jsonl" || evs[0].Count != 3 {
		t.Errorf("journal = %+v", evs)
	}
}

func TestHTTPReadOnlyFileIsServiceUnavailableForWrites(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A"})
	ro := f.reopenReadOnly(t)
	h := handler(ro, New(ro))
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
