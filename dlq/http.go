package dlq

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/queue"
)

// Routes, on the control socket (reachable only by administrators, so the
// actor header is trusted there):
//
//	GET  /v1/dlq?reason=&since=&until=&limit=        ListResult
//	GET  /v1/dlq/{key}?payload=1                     Detail
//	POST /v1/dlq/redrive   RedriveBody               RedriveResult, or with
//	                       ?stream=1 or Accept: application/x-ndjson,
//	                       RedriveEvent lines
//	GET  /v1/dlq/export?reason=&since=&until=&limit=&reason_text=&dest=
//	                                                 JSON lines of Detail
//	POST /v1/dlq/purge     PurgeBody                 PurgeResult
//	GET  /v1/audit?since=&until=&action=             AuditResult
//
// Times in queries are RFC 3339, or a duration ago ("24h", "7d"). The actor
// is taken from the control.ActorHeader header (DefaultActor without one).
// A refusal is a control.ErrorBody: 400 for bad input (naming the field),
// 404 for a key that is not quarantined (show), 503 when the data file is
// open read-only or closed, 507 when the disk is full.
func Register(mux *http.ServeMux, s *Service) {
	mux.HandleFunc("GET /v1/dlq", s.handleList)
	mux.HandleFunc("GET /v1/dlq/export", s.handleExport)
	mux.HandleFunc("GET /v1/dlq/{key}", s.handleShow)
	mux.HandleFunc("POST /v1/dlq/redrive", s.handleRedrive)
	mux.HandleFunc("POST /v1/dlq/purge", s.handlePurge)
	mux.HandleFunc("GET /v1/audit", s.handleAudit)
}

// RedriveBody is the request of POST /v1/dlq/redrive. Spread is a Go
// duration ("10m").
type RedriveBody struct {
	Selection
	ReasonText string `json:"reason_text"`
	Spread     string `json:"spread,omitempty"`
	DryRun     bool   `json:"dry_run,omitempty"`
}

// RedriveEvent is one line of a streamed redrive answer: progress lines,
// then one line with the result, or with an error (and the result of what
// was done before it).
type RedriveEvent struct {
	Progress *Progress      `json:"progress,omitempty"`
	Result   *RedriveResult `json:"result,omitempty"`
	Error    string         `json:"error,omitempty"`
	Code     int            `json:"code,omitempty"` // the HTTP status the error would have had
}

// Progress counts the movements done of those selected.
type Progress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// PurgeBody is the request of POST /v1/dlq/purge.
type PurgeBody struct {
	Keys       []string `json:"keys"`
	ReasonText string   `json:"reason_text"`
	Confirm    bool     `json:"confirm"`
}

// Headers of the export answer.
const (
	// CountHeader is the number of movements selected for the export.
	CountHeader = "Rx-Count"
	// ErrorTrailer is set, as a trailer, when an export failed after it
	// started: the lines before it are whole, but some are missing.
	ErrorTrailer = "Rx-Error"
)

// Query is the filter as query parameters of GET /v1/dlq and
// /v1/dlq/export.
func (f Filter) Query() url.Values {
	v := url.Values{}
	if f.Reason != "" {
		v.Set("reason", f.Reason)
	}
	if !f.Since.IsZero() {
		v.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		v.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.Limit != 0 {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	return v
}

// Query is the filter as query parameters of GET /v1/audit.
func (f AuditFilter) Query() url.Values {
	v := url.Values{}
	if !f.Since.IsZero() {
		v.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		v.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	if len(f.Actions) > 0 {
		v.Set("action", strings.Join(f.Actions, ","))
	}
	return v
}

func (s *Service) filterFromQuery(op string, v url.Values) (Filter, error) {
	f := Filter{Reason: v.Get("reason")}
	var err error
	if f.Since, err = s.timeParam(op, v, "since"); err != nil {
		return f, err
	}
	if f.Until, err = s.timeParam(op, v, "until"); err != nil {
		return f, err
	}
	if l := v.Get("limit"); l != "" {
		if f.Limit, err = strconv.Atoi(l); err != nil {
			return f, InputErrorf(op, "limit", "--limit", "%q is not a whole number", clip(l))
		}
	}
	return f, nil
}

func (s *Service) timeParam(op string, v url.Values, name string) (time.Time, error) {
	p := v.Get(name)
	if p == "" {
		return time.Time{}, nil
	}
	t, err := ParseTime(p, s.clock())
	if err != nil {
		return t, &InputError{Op: op, Field: name, Flag: "--" + name, Msg: fmt.Sprintf("%s (--%s): %v", name, name, err)}
	}
	return t, nil
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request) {
	f, err := s.filterFromQuery("list", r.URL.Query())
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := s.List(f)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Service) handleShow(w http.ResponseWriter, r *http.Request) {
	withPayload, _ := strconv.ParseBool(r.URL.Query().Get("payload"))
	d, err := s.Show(r.PathValue("key"), withPayload, r.Header.Get(control.ActorHeader))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Service) handleRedrive(w http.ResponseWriter, r *http.Request) {
	var body RedriveBody
	if err := decodeBody(w, r, "redrive", &body); err != nil {
		writeError(w, err)
		return
	}
	rq := RedriveRequest{Selection: body.Selection, Actor: r.Header.Get(control.ActorHeader), ReasonText: body.ReasonText, DryRun: body.DryRun}
	if body.Spread != "" {
		d, err := time.ParseDuration(body.Spread)
		if err != nil {
			writeError(w, InputErrorf("redrive", "spread", "--spread", "%q is not a duration (e.g. 10m, 2h)", clip(body.Spread)))
			return
		}
		rq.Spread = d
	}
	if stream, _ := strconv.ParseBool(r.URL.Query().Get("stream")); !stream && !acceptsNDJSON(r) {
		res, err := s.Redrive(r.Context(), rq)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}

	// Streamed: the status line goes out with the first progress line, so
	// that a refusal before any work still gets its own status code.
	started := false
	enc := json.NewEncoder(w)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	start := func() {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
	}
	rq.Progress = func(done, total int) {
		start()
		enc.Encode(RedriveEvent{Progress: &Progress{Done: done, Total: total}})
		flush()
	}
	res, err := s.Redrive(r.Context(), rq)
	if err != nil && !started {
		writeError(w, err)
		return
	}
	start()
	ev := RedriveEvent{Result: &res}
	if err != nil {
		ev.Error, ev.Code = err.Error(), statusOf(err)
	}
	enc.Encode(ev)
	flush()
}

func (s *Service) handleExport(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := s.filterFromQuery("export", q)
	if err != nil {
		writeError(w, err)
		return
	}
	e, err := s.StartExport(ExportRequest{Filter: f, Actor: r.Header.Get(control.ActorHeader), ReasonText: q.Get("reason_text"), Dest: q.Get("dest")})
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set(CountHeader, strconv.Itoa(e.Len()))
	w.Header().Set("Trailer", ErrorTrailer)
	w.WriteHeader(http.StatusOK)
	if _, err := e.Stream(r.Context(), w); err != nil {
		w.Header().Set(ErrorTrailer, err.Error())
	}
}

func (s *Service) handlePurge(w http.ResponseWriter, r *http.Request) {
	var body PurgeBody
	if err := decodeBody(w, r, "purge", &body); err != nil {
		writeError(w, err)
		return
	}
	res, err := s.Purge(r.Context(), PurgeRequest{Keys: body.Keys, Actor: r.Header.Get(control.ActorHeader), ReasonText: body.ReasonText, Confirm: body.Confirm})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Service) handleAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var f AuditFilter
	var err error
	if f.Since, err = s.timeParam("audit", q, "since"); err != nil {
		writeError(w, err)
		return
	}
	if f.Until, err = s.timeParam("audit", q, "until"); err != nil {
		writeError(w, err)
		return
	}
	for _, a := range q["action"] {
		f.Actions = append(f.Actions, strings.Split(a, ",")...)
	}
	res, err := s.Audit(f)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// maxBodyBytes bounds a request: a million keys fit.
const maxBodyBytes = 64 << 20

func decodeBody(w http.ResponseWriter, r *http.Request, op string, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return InputErrorf(op, "body", "", "is larger than %d bytes: select fewer keys per request", maxBodyBytes)
		}
		return InputErrorf(op, "body", "", "is not the expected JSON object: %v", err)
	}
	return nil
}

func acceptsNDJSON(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(a)); err == nil && mt == "application/x-ndjson" {
			return true
		}
	}
	return false
}

// statusOf maps an error of the Service to its HTTP status.
func statusOf(err error) int {
	var ie *InputError
	switch {
	case errors.As(err, &ie):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotQuarantined):
		return http.StatusNotFound
	case errors.Is(err, queue.ErrReadOnly), errors.Is(err, queue.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, queue.ErrDiskFull):
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

func writeError(w http.ResponseWriter, err error) {
	body := control.ErrorBody{Error: err.Error()}
	var ke *KeyError
	if errors.As(err, &ke) {
		body.Key = ke.Key
	}
	if errors.Is(err, queue.ErrReadOnly) {
		body.Error = fmt.Sprintf("%v (this operation writes to the audit journal: open the data file read-write)", err)
	}
	writeJSON(w, statusOf(err), body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
