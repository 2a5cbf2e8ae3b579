package control

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

	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/queue"
)

// RedriveBody is the request of POST /v1/dlq/redrive. Spread is a Go
// duration ("10m").
type RedriveBody struct {
	dlq.Selection
	ReasonText string `json:"reason_text"`
	Spread     string `json:"spread,omitempty"`
	DryRun     bool   `json:"dry_run,omitempty"`
}

// RedriveEvent is one line of a streamed redrive answer: progress lines,
// then one line with the result, or with an error (and the result of what
// was done before it).
type RedriveEvent struct {
	Progress *dlq.Progress      `json:"progress,omitempty"`
	Result   *dlq.RedriveResult `json:"result,omitempty"`
	Error    string             `json:"error,omitempty"`
	Code     int                `json:"code,omitempty"` // the HTTP status the error would have had
}

// PurgeBody is the request of POST /v1/dlq/purge.
type PurgeBody struct {
	dlq.Selection
	ReasonText string `json:"reason_text"`
	Confirm    bool   `json:"confirm"`
}

// Headers of the export answer.
const (
	// CountHeader is the number of movements selected for the export.
	CountHeader = "Rx-Count"
	// ErrorTrailer is set, as a trailer, when an export failed after it
	// started: the lines before it are whole, but some are missing.
	ErrorTrailer = "Rx-Error"
)

// filterQuery is f as the query of GET /v1/dlq and /v1/dlq/export.
func filterQuery(f dlq.Filter) url.Values {
	v := url.Values{}
	if f.Reason != "" {
		v.Set("reason", f.Reason)
	}
	setTime(v, "since", f.Since)
	setTime(v, "until", f.Until)
	if f.Limit != 0 {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	return v
}

// auditQuery is f as the query of GET /v1/audit.
func auditQuery(f dlq.AuditFilter) url.Values {
	v := url.Values{}
	setTime(v, "since", f.Since)
	setTime(v, "until", f.Until)
	if len(f.Actions) > 0 {
		v.Set("action", strings.Join(f.Actions, ","))
	}
	if f.Key != "" {
		v.Set("key", f.Key)
	}
	if f.Actor != "" {
		v.Set("actor", f.Actor)
	}
	return v
}

func setTime(v url.Values, name string, t time.Time) {
	if !t.IsZero() {
		v.Set(name, t.UTC().Format(time.RFC3339Nano))
	}
}

func (s *Server) filterFromQuery(op string, v url.Values) (dlq.Filter, error) {
	f := dlq.Filter{Reason: v.Get("reason")}
	var err error
	if f.Since, err = s.timeParam(op, v, "since"); err != nil {
		return f, err
	}
	if f.Until, err = s.timeParam(op, v, "until"); err != nil {
		return f, err
	}
	if l := v.Get("limit"); l != "" {
		if f.Limit, err = strconv.Atoi(l); err != nil {
			return f, dlq.InputErrorf(op, "limit", "--limit", "%q is not a whole number", clip(l))
		}
	}
	return f, nil
}

func (s *Server) timeParam(op string, v url.Values, name string) (time.Time, error) {
	p := v.Get(name)
	if p == "" {
		return time.Time{}, nil
	}
	t, err := cli.ParseTime(p, s.opts.Clock())
	if err != nil {
		return t, &dlq.InputError{Op: op, Field: name, Flag: "--" + name, Msg: fmt.Sprintf("%s (--%s): %v", name, name, err)}
	}
	return t, nil
}

// clip shortens operator input quoted back in an error.
func clip(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}

func (s *Server) dlqList(w http.ResponseWriter, r *http.Request) {
	f, err := s.filterFromQuery("list", r.URL.Query())
	if err != nil {
		writeServiceError(w, err)
		return
	}
	res, err := s.opts.DLQ.List(f)
	if err != nil {
		writeServiceError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) dlqSummary(w http.ResponseWriter, r *http.Request) {
	f, err := s.filterFromQuery("list", r.URL.Query())
	if err != nil {
		writeServiceError(w, err)
		return
	}
	res, err := s.opts.DLQ.Summarize(f)
	if err != nil {
		writeServiceError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) dlqShow(w http.ResponseWriter, r *http.Request) {
	withPayload, _ := strconv.ParseBool(r.URL.Query().Get("payload"))
	d, err := s.opts.DLQ.Show(r.PathValue("key"), withPayload, r.Header.Get(ActorHeader))
	if err != nil {
		writeServiceError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) dlqRedrive(w http.ResponseWriter, r *http.Request) {
	var body RedriveBody
	if err := decodeBody(w, r, "redrive", &body); err != nil {
		writeServiceError(w, err)
		return
	}
	rq := dlq.RedriveRequest{Selection: body.Selection, Actor: r.Header.Get(ActorHeader), ReasonText: body.ReasonText, DryRun: body.DryRun}
	if body.Spread != "" {
		d, err := time.ParseDuration(body.Spread)
		if err != nil {
			writeServiceError(w, dlq.InputErrorf("redrive", "spread", "--spread", "%q is not a duration (e.g. 10m, 2h)", clip(body.Spread)))
			return
		}
		rq.Spread = d
	}
	if stream, _ := strconv.ParseBool(r.URL.Query().Get("stream")); !stream && !acceptsNDJSON(r) {
		res, err := s.opts.DLQ.Redrive(r.Context(), rq)
		if err != nil {
			writeServiceError(w, err)
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
		enc.Encode(RedriveEvent{Progress: &dlq.Progress{Done: done, Total: total}})
		flush()
	}
	res, err := s.opts.DLQ.Redrive(r.Context(), rq)
	if err != nil && !started {
		writeServiceError(w, err)
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

func (s *Server) dlqExport(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := s.filterFromQuery("export", q)
	if err != nil {
		writeServiceError(w, err)
		return
	}
	e, err := s.opts.DLQ.StartExport(dlq.ExportRequest{Filter: f, Actor: r.Header.Get(ActorHeader), ReasonText: q.Get("reason_text"), Dest: q.Get("dest")})
	if err != nil {
		writeServiceError(w, err)
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

func (s *Server) dlqPurge(w http.ResponseWriter, r *http.Request) {
	var body PurgeBody
	if err := decodeBody(w, r, "purge", &body); err != nil {
		writeServiceError(w, err)
		return
	}
	res, err := s.opts.DLQ.Purge(r.Context(), dlq.PurgeRequest{Keys: body.Keys, All: body.All, Reason: body.Reason, Oldest: body.Oldest,
		Actor: r.Header.Get(ActorHeader), ReasonText: body.ReasonText, Confirm: body.Confirm})
	if err != nil {
		writeServiceError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var f dlq.AuditFilter
	var err error
	if f.Since, err = s.timeParam("audit", q, "since"); err != nil {
		writeServiceError(w, err)
		return
	}
	if f.Until, err = s.timeParam("audit", q, "until"); err != nil {
		writeServiceError(w, err)
		return
	}
	for _, a := range q["action"] {
		f.Actions = append(f.Actions, strings.Split(a, ",")...)
	}
	f.Key, f.Actor = q.Get("key"), q.Get("actor")
	res, err := s.opts.DLQ.Audit(f)
	if err != nil {
		writeServiceError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// maxOperatorBodyBytes bounds an operator's request: a million keys fit.
const maxOperatorBodyBytes = 64 << 20

func decodeBody(w http.ResponseWriter, r *http.Request, op string, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxOperatorBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return dlq.InputErrorf(op, "body", "", "is larger than %d bytes: select fewer keys per request", maxOperatorBodyBytes)
		}
		return dlq.InputErrorf(op, "body", "", "is not the expected JSON object: %v", err)
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

// statusOf maps an error of the dlq Service to its HTTP status.
func statusOf(err error) int {
	var ie *dlq.InputError
	switch {
	case errors.As(err, &ie):
		return http.StatusBadRequest
	case errors.Is(err, dlq.ErrNotQuarantined):
		return http.StatusNotFound
	case errors.Is(err, queue.ErrReadOnly), errors.Is(err, queue.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, queue.ErrDiskFull):
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// writeServiceError answers with an error of the dlq Service.
func writeServiceError(w http.ResponseWriter, err error) {
	body := ErrorBody{Error: err.Error()}
	var ke *dlq.KeyError
	if errors.As(err, &ke) {
		body.Key = ke.Key
	}
	if errors.Is(err, queue.ErrReadOnly) {
		body.Error = fmt.Sprintf("%v (this operation writes to the audit journal: open the data file read-write)", err)
	}
	writeJSON(w, statusOf(err), body)
}
