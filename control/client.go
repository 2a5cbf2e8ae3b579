package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"strings"
	stdsync "sync"
	"time"

	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/status"
)

// Client calls the local API, over the control socket or in-process, with
// a method per route. A refusal by the agent is an *APIError.
type Client struct {
	http  *http.Client
	base  string
	actor string
}

// ActorHeader carries who runs a CLI command, for the audit journal.
const ActorHeader = "Rx-Actor"

// Dial returns a client for the agent listening on the control channel at
// endpoint (from Endpoint). It does not connect; see Ping.
func Dial(endpoint string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialEndpoint(ctx, endpoint)
		},
		MaxIdleConns:    4,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{http: &http.Client{Transport: tr}, base: "http://agent", actor: LocalActor()}
}

// InProcess returns a client that calls h directly: the CLI uses it over a
// data file it opened itself when the agent is not running.
func InProcess(h http.Handler) *Client {
	return &Client{http: &http.Client{Transport: handlerTransport{h}}, base: "http://local", actor: LocalActor()}
}

// LocalActor names the operating-system user running this process, as
// recorded in the audit journal. Operators of an installed agent run its
// commands with sudo; the journal then names the person, not root.
func LocalActor() string {
	return localActor(os.Getenv("SUDO_USER"), user.Current)
}

func localActor(sudoUser string, current func() (*user.User, error)) string {
	name := "unknown"
	if u, err := current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if sudoUser != "" && sudoUser != name {
		return "local:" + sudoUser + " (sudo as " + name + ")"
	}
	return "local:" + name
}

// handlerTransport serves requests with a handler in this process. The
// answer streams: RoundTrip returns once the handler wrote its header, and
// the body is read while the handler writes it, so a large export is never
// held in memory. Closing the body early makes the handler's writes fail.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	w := &pipeWriter{header: make(http.Header), pw: pw, ready: make(chan struct{})}
	resp := &http.Response{Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Body: pr, Request: r, Trailer: make(http.Header)}
	go func() {
		defer func() {
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing
			// Trailers are set before the reader can see the end of the body.
			for _, k := range strings.Split(w.sent.Get("Trailer"), ",") {
				if k = strings.TrimSpace(k); k != "" {
					resp.Trailer[http.CanonicalHeaderKey(k)] = w.header.Values(k)
				}
			}
			pw.Close()
		}()
		t.h.ServeHTTP(w, r)
	}()
	<-w.ready
	resp.StatusCode, resp.Status, resp.Header = w.code, fmt.Sprintf("%d %s", w.code, http.StatusText(w.code)), w.sent
	return resp, nil
}

// pipeWriter is the http.ResponseWriter of handlerTransport.
type pipeWriter struct {
	header http.Header
	sent   http.Header // the header as it was when written
	code   int
	pw     *io.PipeWriter
	once   stdsync.Once
	ready  chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.code, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush is a no-op: every write reaches the reader at once.
func (w *pipeWriter) Flush() {}

// CloseIdleConnections closes the connections kept for reuse.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Ping reports whether an agent answers.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.do(ctx, http.MethodGet, "/healthz", nil, nil)
}

// APIError is a refusal from the agent.
type APIError struct {
	Code int
	Body ErrorBody
}

func (e *APIError) Error() string { return e.Body.Error }

// do sends a request with an optional JSON body and decodes a JSON answer
// into out (unless out is nil). A non-2xx answer is an *APIError.
func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if b, ok := body.([]byte); ok {
		rd = bytes.NewReader(b)
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	resp, err := c.raw(ctx, method, path, rd, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("control: decoding the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// raw sends a request and returns the answer for streaming; a non-2xx
// answer is returned as an *APIError.
func (c *Client) raw(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set(ActorHeader, c.actor)
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%w: run the command as an administrator (sudo), or as the agent's user", ErrNoPermission)
		}
		if isNotRunning(err) {
			return nil, errNotRunning
		}
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		e := &APIError{Code: resp.StatusCode}
		if err := json.NewDecoder(resp.Body).Decode(&e.Body); err != nil || e.Body.Error == "" {
			e.Body.Error = fmt.Sprintf("%s %s: %s", method, path, resp.Status)
		}
		return nil, e
	}
	return resp, nil
}

// errNotRunning is returned when no agent answers on the socket.
var errNotRunning = errors.New("control: the agent is not running")

// ErrNoPermission is returned when the control socket refuses this user:
// only administrators and the agent's own user may use it (DESIGN P7).
var ErrNoPermission = errors.New("control: permission denied on the agent's control socket")

func isNotRunning(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Ready reports whether the agent takes submissions: an *APIError with
// code 503 while it shuts down.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil)
}

// Metrics writes the agent's metrics, in the Prometheus text format, to w.
func (c *Client) Metrics(ctx context.Context, w io.Writer) error {
	resp, err := c.raw(ctx, http.MethodGet, "/metrics", nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// Status returns the agent's status document.
func (c *Client) Status(ctx context.Context) (*status.Status, error) {
	var s status.Status
	if err := c.do(ctx, http.MethodGet, "/v1/status", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Submit submits movements, all or nothing: a JSON object, a JSON array
// of them, or NDJSON with contentType application/x-ndjson. A refusal
// (400, 409, 413, ...) is an *APIError naming every problem; nothing was
// stored.
func (c *Client) Submit(ctx context.Context, body []byte, contentType string) (*Submission, error) {
	resp, err := c.raw(ctx, http.MethodPost, IngestPath, bytes.NewReader(body), contentType)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var sub Submission
	if err := json.NewDecoder(resp.Body).Decode(&sub); err != nil {
		return nil, fmt.Errorf("control: decoding the submission answer: %w", err)
	}
	return &sub, nil
}

// SubmitEach submits NDJSON movements; each is stored or refused on its own.
func (c *Client) SubmitEach(ctx context.Context, ndjson []byte) ([]ItemResult, error) {
	resp, err := c.raw(ctx, http.MethodPost, IngestPath+"?each=1", bytes.NewReader(ndjson), "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res []ItemResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return nil, fmt.Errorf("control: decoding the submission answer: %w", err)
	}
	return res, nil
}

// DLQList lists the quarantined movements that match f, oldest first,
// without payloads.
func (c *Client) DLQList(ctx context.Context, f dlq.Filter) (*dlq.ListResult, error) {
	var res dlq.ListResult
	if err := c.do(ctx, http.MethodGet, "/v1/dlq?"+filterQuery(f).Encode(), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// DLQSummary counts the quarantined movements that match f by reason and
// class (f.Limit is ignored).
func (c *Client) DLQSummary(ctx context.Context, f dlq.Filter) (*dlq.Summary, error) {
	var res dlq.Summary
	f.Limit = 0
	if err := c.do(ctx, http.MethodGet, "/v1/dlq/summary?"+filterQuery(f).Encode(), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// DLQShow returns one quarantined movement's failure context, with its
// payload when withPayload is set (the agent journals that viewing). key
// may be a key, a unique key prefix or a movement_id. A key that is not
// quarantined is an *APIError with code 404; an ambiguous prefix one with
// code 400.
func (c *Client) DLQShow(ctx context.Context, key string, withPayload bool) (*dlq.Detail, error) {
	path := "/v1/dlq/" + url.PathEscape(key)
	if withPayload {
		path += "?payload=1"
	}
	var d dlq.Detail
	if err := c.do(ctx, http.MethodGet, path, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// DLQRedrive sends quarantined movements again. The agent streams its
// progress: rq.Progress, when set, is called with each step. rq.Actor is
// not sent: the agent records the client's user. An error after some
// movements were redriven is an *APIError that says how many, returned
// with the result of what was done.
func (c *Client) DLQRedrive(ctx context.Context, rq dlq.RedriveRequest) (*dlq.RedriveResult, error) {
	body := RedriveBody{Selection: rq.Selection, ReasonText: rq.ReasonText, DryRun: rq.DryRun}
	if rq.Spread != 0 {
		body.Spread = rq.Spread.String()
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	resp, err := c.raw(ctx, http.MethodPost, "/v1/dlq/redrive?stream=1", bytes.NewReader(b), "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 256<<20) // the result line lists every key
	for sc.Scan() {
		var ev RedriveEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("redrive: reading the agent's answer: %w", err)
		}
		if p := ev.Progress; p != nil && rq.Progress != nil {
			rq.Progress(p.Done, p.Total)
		}
		if ev.Error != "" {
			// The message says how many were redriven before it stopped.
			return ev.Result, &APIError{Code: ev.Code, Body: ErrorBody{Error: ev.Error}}
		}
		if ev.Result != nil {
			return ev.Result, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("redrive: reading the agent's answer: %w", err)
	}
	return nil, errors.New("redrive: the agent's answer ended without a result: check `agent audit --action redrive` for what was done")
}

// DLQExport starts an export of the quarantined movements that match
// rq.Filter; the agent journals it before it sends anything. rq.Actor is
// not sent: the agent records the client's user. Read the movements from
// the answer and close it.
func (c *Client) DLQExport(ctx context.Context, rq dlq.ExportRequest) (*ExportReader, error) {
	q := filterQuery(rq.Filter)
	q.Set("dest", rq.Dest)
	if rq.ReasonText != "" {
		q.Set("reason_text", rq.ReasonText)
	}
	resp, err := c.raw(ctx, http.MethodGet, "/v1/dlq/export?"+q.Encode(), nil, "")
	if err != nil {
		return nil, err
	}
	n, _ := strconv.Atoi(resp.Header.Get(CountHeader))
	return &ExportReader{Count: n, resp: resp}, nil
}

// ExportReader is an export as it arrives: dlq.Detail lines, with their
// payloads, oldest quarantine first.
type ExportReader struct {
	// Count is the number of movements selected. Fewer arrive when some
	// are redriven or purged while the export runs.
	Count int
	resp  *http.Response
}

// Read reads the export. When the agent failed after it started, the
// export ends, after the last whole line, with an *ExportError instead of
// io.EOF.
func (e *ExportReader) Read(p []byte) (int, error) {
	n, err := e.resp.Body.Read(p)
	if err == io.EOF {
		if msg := e.resp.Trailer.Get(ErrorTrailer); msg != "" {
			return n, &ExportError{Msg: msg}
		}
	}
	return n, err
}

// Close closes the answer; closing it early stops the export.
func (e *ExportReader) Close() error { return e.resp.Body.Close() }

// ExportError is how an export ends when the agent failed after it
// started: the lines before it are whole, but some are missing.
type ExportError struct {
	Msg string // the agent's error
}

func (e *ExportError) Error() string { return "export incomplete: " + e.Msg }

// DLQPurge removes quarantined movements for good, after the agent
// exported them to its data directory. rq.Actor and rq.Dir are not sent:
// the agent records the client's user and writes to its own directory.
func (c *Client) DLQPurge(ctx context.Context, rq dlq.PurgeRequest) (*dlq.PurgeResult, error) {
	var res dlq.PurgeResult
	body := PurgeBody{Selection: dlq.Selection{Keys: rq.Keys, All: rq.All, Reason: rq.Reason, Oldest: rq.Oldest}, ReasonText: rq.ReasonText, Confirm: rq.Confirm}
	if err := c.do(ctx, http.MethodPost, "/v1/dlq/purge", body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Audit returns the journal events that match f, oldest first.
func (c *Client) Audit(ctx context.Context, f dlq.AuditFilter) (*dlq.AuditResult, error) {
	var res dlq.AuditResult
	if err := c.do(ctx, http.MethodGet, "/v1/audit?"+auditQuery(f).Encode(), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
