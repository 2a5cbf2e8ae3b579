package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/queue"
)

// TestIngestRefusesBrowsers sends what a web page can make a browser send
// to the loopback ingest listener (CSRF, DNS rebinding): each is refused
// before anything is read or stored, unless configured.
func TestIngestRefusesBrowsers(t *testing.T) {
	_, q, hs := newServer(t, "")
	tests := []struct {
		name    string
		host    string
		headers map[string]string
		code    int
	}{
		{"loopback address", "127.0.0.1:8717", nil, 202},
		{"localhost", "localhost:8717", nil, 202},
		{"ipv6 loopback", "[::1]:8717", nil, 202},
		{"rebound name", "attacker.example:8717", nil, 403},
		{"foreign origin", "127.0.0.1:8717", map[string]string{"Origin": "https://attacker.example"}, 403},
		{"null origin", "127.0.0.1:8717", map[string]string{"Origin": "null"}, 403},
		{"cross-site fetch", "127.0.0.1:8717", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"same-site fetch", "127.0.0.1:8717", map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"typed in the address bar", "127.0.0.1:8717", map[string]string{"Sec-Fetch-Site": "none"}, 202},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := pending(t, q)
			req, _ := http.NewRequest(http.MethodPost, hs.URL+IngestPath, strings.NewReader(mv("B"+string(rune('a'+i)), 1)))
			req.Host = tt.host
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tt.headers {
				req.Header.Set(k, v)
			}
			resp, err := hs.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Fatalf("got %d, want %d", resp.StatusCode, tt.code)
			}
			if stored := pending(t, q) - before; (stored == 1) != (tt.code == 202) {
				t.Fatalf("%d stored with answer %d", stored, resp.StatusCode)
			}
		})
	}
}

func TestIngestAllowedOriginsAndHosts(t *testing.T) {
	s := New(Options{Queue: openQueue(t), StoreID: store, AllowedHosts: []string{"pos-pc"}, AllowedOrigins: []string{"https://pos.example"}, IngestListen: "192.0.2.7:8717"})
	h := s.IngestHandler()
	tests := []struct {
		host, origin string
		code         int
	}{
		{"pos-pc:8717", "", 202},
		{"192.0.2.7:8717", "", 202},
		{"127.0.0.1", "https://pos.example", 202},
		{"127.0.0.1", "https://pos.example.attacker.example", 403},
		{"other-pc:8717", "", 403},
	}
	for i, tt := range tests {
		req := httptest.NewRequest(http.MethodPost, IngestPath, strings.NewReader(mv("O"+string(rune('a'+i)), 1)))
		req.Host = tt.host
		req.Header.Set("Content-Type", "application/json")
		if tt.origin != "" {
			req.Header.Set("Origin", tt.origin)
			req.Header.Set("Sec-Fetch-Site", "cross-site")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tt.code {
			t.Errorf("host %s origin %q: got %d, want %d", tt.host, tt.origin, rec.Code, tt.code)
		}
	}
}

// TestIngestBoundsTheAnswer submits requests built to amplify: every
// refusal lists at most MaxErrors errors with the total, and a request of
// more than DefaultMaxMovements movements is refused whole.
func TestIngestBoundsTheAnswer(t *testing.T) {
	q := openQueue(t)
	s := New(Options{Queue: q, StoreID: store})
	h := s.IngestHandler()
	post := func(ct, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	empties := strings.Repeat("{}\n", DefaultMaxMovements)
	t.Run("all or nothing", func(t *testing.T) {
		rec := post("application/x-ndjson", IngestPath, empties)
		var b ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || rec.Code != 400 {
			t.Fatalf("got %d %v", rec.Code, err)
		}
		if len(b.Errors) != MaxErrors || !b.Truncated || b.ErrorsTotal < DefaultMaxMovements {
			t.Fatalf("got %d errors of %d, truncated %v; want %d of at least %d, truncated", len(b.Errors), b.ErrorsTotal, b.Truncated, MaxErrors, DefaultMaxMovements)
		}
		if rec.Body.Len() > 32<<10 {
			t.Fatalf("the answer is %d bytes", rec.Body.Len())
		}
	})
	t.Run("each", func(t *testing.T) {
		rec := post("application/x-ndjson", IngestPath+"?each=1", empties)
		var res []ItemResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || rec.Code != 200 {
			t.Fatalf("got %d %v", rec.Code, err)
		}
		spelled := 0
		for _, r := range res {
			if r.Status != StatusRejected {
				t.Fatalf("item %d: %s", r.Item, r.Status)
			}
			spelled += len(r.Errors)
		}
		if len(res) != DefaultMaxMovements || spelled != MaxErrors {
			t.Fatalf("got %d results spelling %d errors, want %d spelling %d", len(res), spelled, DefaultMaxMovements, MaxErrors)
		}
		if rec.Body.Len() > 1<<20 {
			t.Fatalf("the answer is %d bytes", rec.Body.Len())
		}
	})
	for _, tt := range []struct{ name, ct, body string }{
		{"ndjson", "application/x-ndjson", empties + "{}\n"},
		{"array", "application/json", "[" + strings.Repeat("{},", DefaultMaxMovements) + "{}]"},
	} {
		t.Run("too many "+tt.name, func(t *testing.T) {
			if rec := post(tt.ct, IngestPath, tt.body); rec.Code != 413 || !strings.Contains(rec.Body.String(), "more than 10000 movements") {
				t.Fatalf("got %d %s", rec.Code, rec.Body.String())
			}
		})
	}
	for _, tt := range []struct {
		name, ct, body string
		code           int
	}{
		{"text/plain", "text/plain", mv("T", 1), 415},
		{"form", "application/x-www-form-urlencoded", mv("T", 1), 415},
		{"no type", "", mv("T", 1), 415},
		{"latin-1", "application/json; charset=iso-8859-1", mv("T", 1), 415},
		{"invalid utf-8", "application/json", strings.Replace(mv("T", 1), `"note"`, `"no\xfft"`, 1)[:60] + "\xff\xfe" + `"}`, 400},
		{"invalid utf-8 in a note", "application/x-ndjson", mv("T", 1)[:len(mv("T", 1))-1] + `,"note":"caf` + "\xe9" + `"}`, 400},
		{"utf-8", "application/json; charset=UTF-8", mv("T", 1), 202},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if rec := post(tt.ct, IngestPath, tt.body); rec.Code != tt.code {
				t.Fatalf("got %d %s, want %d", rec.Code, rec.Body.String(), tt.code)
			}
		})
	}
	if n := pending(t, q); n != 1 {
		t.Fatalf("%d stored, want 1", n)
	}
}

// FuzzSplitBody checks that splitting never panics, never returns more
// than the limit, returns only slices of valid UTF-8 that lie in the
// body, and allocates within the bound (see checkSplitBound).
func FuzzSplitBody(f *testing.F) {
	f.Add([]byte(mv("A", 1)), false)
	f.Add([]byte("["+mv("A", 1)+","+mv("B", 2)+"]"), false)
	f.Add([]byte(mv("A", 1)+"\n\n"+mv("B", 2)+"\n"), true)
	f.Add([]byte(strings.Repeat("[", 20000)), false)
	f.Add([]byte("{}\n\xff\n"), true)
	f.Fuzz(func(t *testing.T, body []byte, lines bool) {
		ct := "application/json"
		if lines {
			ct = "application/x-ndjson"
		}
		const limit = 50
		checkSplitBound(t, body, ct, limit)
		items, nums, herr := splitBody(body, ct, limit)
		if herr != nil {
			if herr.code != 400 && herr.code != 413 {
				t.Fatalf("code %d", herr.code)
			}
			return
		}
		if len(items) == 0 || len(items) > limit {
			t.Fatalf("%d items", len(items))
		}
		if lines && len(nums) != len(items) {
			t.Fatalf("%d line numbers for %d items", len(nums), len(items))
		}
		total := 0
		for _, it := range items {
			total += len(it)
		}
		if total > len(body) {
			t.Fatalf("items hold %d bytes of a %d-byte body", total, len(body))
		}
	})
}

func openQueue(t *testing.T) *queue.Queue {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}
