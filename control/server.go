// Package control is the agent's local API: every local route, in one
// table (Server.routes) that says which listener serves it, and Client, a
// typed method per route. The loopback ingest listener serves the intake,
// status, health and metrics, behind the ingest token; the control socket
// serves those and the operator's routes (the quarantine and the audit
// journal, through package dlq). The CLI talks to it through Client, over
// the socket when the agent runs, or in-process over the data file when it
// does not, so every command has one implementation.
//
// Its promises: a 2xx answer to POST /v1/movements is sent only after the
// movements are in an fsynced commit (DESIGN P1); a refused request stores
// nothing; no answer, log line or error text holds payload data (P6); the
// operator's routes are served only on the control socket, which only
// administrators can reach (P7).
package control

import (
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rxedge/agent/control/ingest"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/status/builder"
)

// Options configure a Server.
type Options struct {
	Queue   *queue.Queue
	StoreID string
	// Clock is used for validation and relative times. Default time.Now.
	Clock func() time.Time
	// MaxRequestBytes bounds a submission. Default DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// MaxMovementBytes bounds one movement of a submission. Default
	// DefaultMaxMovementBytes.
	MaxMovementBytes int64
	// MaxMovements bounds the movements of one submission. Default
	// DefaultMaxMovements.
	MaxMovements int
	// IngestListen is the ingest listener's address: a request whose Host
	// is neither a loopback name or address nor this host, nor one of
	// AllowedHosts, is refused (DNS rebinding).
	IngestListen string
	// AllowedHosts are further Host names the ingest listener answers.
	AllowedHosts []string
	// AllowedOrigins are browser origins (scheme://host[:port]) whose
	// requests the ingest listener takes; any other request with an Origin
	// header, or a cross-site Sec-Fetch-Site, is refused.
	AllowedOrigins []string
	// IngestToken, when set, is required as a bearer token on the ingest
	// listener. The control socket needs none: only administrators can
	// reach it.
	IngestToken string
	// MetricsToken, when set, is required as a bearer token on the
	// metrics listener.
	MetricsToken string
	// Status builds the status document. Default: a builder over Queue
	// for an agent that is not running (the CLI reading the file
	// directly).
	Status *builder.Builder
	// DLQ serves the operator's routes. Default: a service over Queue.
	DLQ     *dlq.Service
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// Counter counts the HTTP intake's movements for status; optional.
	Counter *intake.Counter
	// Formulary is the intakes' formulary (intake.formulary): it
	// resolves bare 10-digit NDCs and names each NDC's unit. Optional.
	Formulary intake.Formulary
}

// Defaults of Options.
const (
	DefaultMaxRequestBytes  = ingest.DefaultMaxRequestBytes
	DefaultMaxMovementBytes = ingest.DefaultMaxMovementBytes
)

// Server serves the local API.
type Server struct {
	opts     Options
	metrics  http.Handler
	draining atomic.Bool
}

// New returns a Server. Zero fields of opts take their defaults.
func New(opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.MaxMovementBytes <= 0 {
		opts.MaxMovementBytes = DefaultMaxMovementBytes
	}
	if opts.MaxMovements <= 0 {
		opts.MaxMovements = DefaultMaxMovements
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Status == nil {
		opts.Status = builder.New(builder.Sources{Queue: opts.Queue, Clock: opts.Clock})
	}
	if opts.DLQ == nil {
		opts.DLQ = dlq.New(opts.Queue)
	}
	return &Server{opts: opts, metrics: opts.Metrics.Handler()}
}

// Drain makes the server refuse new submissions with 503 while in-flight
// requests finish: the first step of a clean shutdown.
func (s *Server) Drain() { s.draining.Store(true) }

// IngestPath is where the ingest listener takes movements.
const IngestPath = "/v1/movements"

// on says which listeners serve a route.
type on uint8

const (
	controlSocket on = 1 << iota
	ingestListener
	metricsListener
	both = controlSocket | ingestListener
)

// route is one entry of the local API.
type route struct {
	pattern string // method and path, as http.ServeMux reads them
	on      on
	serve   http.HandlerFunc
}

// routes is the whole local API. The control socket is reachable only by
// administrators, so the ActorHeader, which names who is recorded in the
// audit journal, is trusted there; the operator's routes are served
// nowhere else.
//
// Times in queries are RFC 3339, or a duration ago ("24h", "7d"). A
// refusal is an ErrorBody: 400 for bad input (naming the field, and the
// CLI flag where there is one), 401 without the ingest token, 404 for a
// key that is not quarantined (show), 409 for a movement id submitted
// before with other content, 413 for a request or a movement too large,
// 503 while the agent shuts down or when the data file is open read-only
// or closed, 507 when the disk is full.
func (s *Server) routes() []route {
	return []route{
		// Submission (all or nothing), or with ?each=1 []ItemResult.
		{"POST " + IngestPath, both, s.postMovements},
		// status.Status.
		{"GET /v1/status", both, s.getStatus},
		// Liveness (no token needed) and readiness (503 while draining).
		{"GET /healthz", both | metricsListener, s.healthz},
		{"GET /readyz", both | metricsListener, s.readyz},
		// Prometheus text.
		{"GET /metrics", both | metricsListener, s.metrics.ServeHTTP},
		// ?reason=&since=&until=&limit= → dlq.ListResult.
		{"GET /v1/dlq", controlSocket, s.dlqList},
		// ?reason=&since=&until=&limit=&reason_text=&dest= → dlq.Detail
		// lines; CountHeader, and ErrorTrailer when it failed midway.
		{"GET /v1/dlq/export", controlSocket, s.dlqExport},
		// ?reason=&since=&until= → dlq.Summary.
		{"GET /v1/dlq/summary", controlSocket, s.dlqSummary},
		// ?payload=1 → dlq.Detail; {key} is a key, a unique key prefix or
		// a movement_id (400 when ambiguous).
		{"GET /v1/dlq/{key}", controlSocket, s.dlqShow},
		// RedriveBody → dlq.RedriveResult, or with ?stream=1 or Accept:
		// application/x-ndjson, RedriveEvent lines.
		{"POST /v1/dlq/redrive", controlSocket, s.dlqRedrive},
		// PurgeBody (the selectors of a redrive) → dlq.PurgeResult.
		{"POST /v1/dlq/purge", controlSocket, s.dlqPurge},
		// ?since=&until=&action=&key=&actor= → dlq.AuditResult.
		{"GET /v1/audit", controlSocket, s.audit},
	}
}

// handler serves the routes of one listener.
func (s *Server) handler(l on) *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		if rt.on&l != 0 {
			mux.HandleFunc(rt.pattern, rt.serve)
		}
	}
	return mux
}

// IngestHandler is the API of the loopback ingest listener: intake, status,
// health and metrics, behind the ingest token when one is configured, and
// refusing what a web browser sends (sameHost).
func (s *Server) IngestHandler() http.Handler {
	return s.sameHost(s.auth(s.handler(ingestListener), s.opts.IngestToken, metrics.ListenerIngest, "ingest.token_file"))
}

// MetricsHandler is the API of the metrics listener: metrics and health,
// behind the metrics token when one is configured. It serves no movement
// and no status, so it may listen beyond loopback (with a token).
func (s *Server) MetricsHandler() http.Handler {
	return s.auth(s.handler(metricsListener), s.opts.MetricsToken, metrics.ListenerMetrics, "metrics.token_file")
}

// ControlHandler is the API of the control socket: every route.
func (s *Server) ControlHandler() http.Handler { return s.handler(controlSocket) }

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// auth requires token as a bearer token on every route but /healthz,
// counting refusals by listener and cause.
func (s *Server) auth(next http.Handler, token, listener, setting string) http.Handler {
	if token == "" {
		return next
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if got := bearer(r); subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			cause := metrics.TokenWrong
			if got == "" {
				cause = metrics.TokenMissing
			}
			s.opts.Metrics.RefusedToken(listener, cause)
			w.Header().Set("WWW-Authenticate", `Bearer realm="rxedge"`)
			writeJSON(w, http.StatusUnauthorized, ErrorBody{Error: "missing or wrong " + listener + " token: send Authorization: Bearer <token from " + setting + ">"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// postMovements is POST IngestPath. By default the request is
// all-or-nothing; with ?each=1 (used by `agent enqueue`) every movement is
// stored or refused on its own and the answer lists each.
func (s *Server) postMovements(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if s.draining.Load() {
		s.refused(w, refuse(http.StatusServiceUnavailable, "the agent is shutting down: resubmit after it restarts"), start, 0)
		return
	}
	items, lines, herr := readItems(w, r, s.opts.MaxRequestBytes, s.opts.MaxMovements)
	if herr != nil {
		s.refused(w, herr, start, 0)
		return
	}
	now := s.opts.Clock()
	if eachItem(r) {
		res, err := submitEach(s.opts.Queue, s.opts.Formulary, items, lines, s.opts.MaxMovementBytes, s.opts.StoreID, now)
		if err != nil {
			s.refused(w, enqueueError(err, lines), start, len(items))
			return
		}
		var acc, dup, rej int
		for _, r := range res {
			switch r.Status {
			case StatusAccepted:
				acc++
			case StatusDuplicate:
				dup++
			default:
				rej++
			}
		}
		s.opts.Metrics.Ingest(time.Since(start), acc, dup, rej)
		s.opts.Counter.Add(acc, dup, rej, now)
		writeJSON(w, http.StatusOK, res)
		return
	}
	if big, total := oversize(items, lines, s.opts.MaxMovementBytes); total > 0 {
		e := refuse(http.StatusRequestEntityTooLarge, "%d movement(s) larger than %d bytes; nothing was stored", total, s.opts.MaxMovementBytes)
		e.body.capErrors(big, total)
		s.refused(w, e, start, len(items))
		return
	}
	prepared, errs, total, unitOnly := prepare(s.opts.Formulary, items, lines, s.opts.StoreID, now)
	if total > 0 {
		e := refuse(http.StatusBadRequest, "%d problem(s) in the submitted movements; nothing was stored", total)
		if unitOnly {
			e = refuse(http.StatusUnprocessableEntity, "%d movement(s) in a unit other than the one the formulary gives their NDC; nothing was stored", total)
		}
		e.body.capErrors(errs, total)
		s.refused(w, e, start, len(items))
		return
	}
	res, err := s.opts.Queue.Enqueue(prepared)
	if err != nil {
		s.refused(w, enqueueError(err, lines), start, len(items))
		return
	}
	out := Submission{Results: make([]Accepted, len(res))}
	for i, r := range res {
		out.Results[i] = Accepted{MovementID: prepared[i].MovementID, Key: hexKey(r.Key), Duplicate: r.Duplicate}
		if r.Duplicate {
			out.Duplicates++
		} else {
			out.Accepted++
		}
	}
	code := http.StatusAccepted
	if out.Accepted == 0 {
		code = http.StatusOK
	}
	s.opts.Metrics.Ingest(time.Since(start), out.Accepted, out.Duplicates, 0)
	s.opts.Counter.Add(out.Accepted, out.Duplicates, 0, now)
	writeJSON(w, code, out)
}

// eachItem reports whether a submission asks for an answer per movement
// (?each=1).
func eachItem(r *http.Request) bool {
	if r.URL.RawQuery == "" {
		return false // the usual submission: no query to parse
	}
	each, _ := strconv.ParseBool(r.URL.Query().Get("each"))
	return each
}

func (s *Server) refused(w http.ResponseWriter, e *httpError, start time.Time, n int) {
	s.opts.Metrics.Ingest(time.Since(start), 0, 0, n)
	s.opts.Counter.Add(0, 0, n, s.opts.Clock())
	s.opts.Metrics.RefusedRequest(e.code)
	if e.code >= 500 {
		s.opts.Logger.Warn("INGEST_REFUSED", "code", e.code, "error", e.body.Error, "movements", n)
	}
	writeJSON(w, e.code, e.body)
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.Status()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, ErrorBody{Error: "reading the status: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// Status is the status document the server answers GET /v1/status with.
func (s *Server) Status() (*status.Status, error) { return s.opts.Status.Status() }

// writeJSON answers with v in JSON and a newline, as json.Encoder writes
// it, in one write.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, err := json.Marshal(v)
	if err != nil {
		return // every answer is a plain struct, map or slice: it marshals
	}
	w.Write(append(b, '\n'))
}
