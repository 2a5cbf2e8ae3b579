package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"strings"
	stdsync "sync"
	"time"

	"github.com/rxedge/agent/status"
)

// Client calls the local API, over the control socket or in-process.
type Client struct {
	http  *http.Client
	base  string
	actor string
}

// ActorHeader carries who runs a CLI command, for the audit journal.
const ActorHeader = "Rx-Actor"

// Dial returns a client for the agent listening on the control socket at
// path. It does not connect; see Ping.
func Dial(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
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
	return c.Do(ctx, http.MethodGet, "/healthz", nil, nil)
}

// APIError is a refusal from the agent.
type APIError struct {
	Code int
	Body ErrorBody
}

func (e *APIError) Error() string { return e.Body.Error }

// Do sends a request with an optional JSON body and decodes a JSON answer
// into out (unless out is nil). A non-2xx answer is an *APIError.
func (c *Client) Do(ctx context.Context, method, path string, body any, out any) error {
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
	resp, err := c.Raw(ctx, method, path, rd, "application/json")
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

// Raw sends a request and returns the answer for streaming; a non-2xx
// answer is returned as an *APIError.
func (c *Client) Raw(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
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

// Status returns the agent's status document.
func (c *Client) Status(ctx context.Context) (*status.Status, error) {
	var s status.Status
	if err := c.Do(ctx, http.MethodGet, "/v1/status", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// SubmitEach submits NDJSON movements; each is stored or refused on its own.
func (c *Client) SubmitEach(ctx context.Context, ndjson []byte) ([]ItemResult, error) {
	resp, err := c.Raw(ctx, http.MethodPost, "/v1/movements?each=1", bytes.NewReader(ndjson), "application/x-ndjson")
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
