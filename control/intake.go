package control

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// ItemError is one field error of one movement of a submission.
type ItemError struct {
	Item  int    `json:"item"` // zero-based position in the submission
	Line  int    `json:"line,omitempty"`
	Field string `json:"field,omitempty"`
	Error string `json:"error"`
}

// Accepted is the answer for one stored movement.
type Accepted struct {
	MovementID string `json:"movement_id"`
	Key        string `json:"key"`
	Duplicate  bool   `json:"duplicate"`
}

// Submission is the answer to a successful POST /v1/movements.
type Submission struct {
	Accepted   int        `json:"accepted"`
	Duplicates int        `json:"duplicates"`
	Results    []Accepted `json:"results"`
}

// ErrorBody is the answer to a refused request. Errors holds at most
// MaxErrors item errors; ErrorsTotal counts them all and Truncated says
// that some were left out.
type ErrorBody struct {
	Error       string      `json:"error"`
	Errors      []ItemError `json:"errors,omitempty"`
	ErrorsTotal int         `json:"errors_total,omitempty"`
	Truncated   bool        `json:"truncated,omitempty"`
	Key         string      `json:"key,omitempty"`
}

// httpError is a refusal with its status code.
type httpError struct {
	code int
	body ErrorBody
}

func refuse(code int, format string, args ...any) *httpError {
	return &httpError{code: code, body: ErrorBody{Error: fmt.Sprintf(format, args...)}}
}

// Limits of one submission's answer and of its parsing.
const (
	// MaxErrors is how many item errors an answer lists; ErrorsTotal
	// counts them all.
	MaxErrors = 100
	// DefaultMaxMovements bounds the movements of one request.
	DefaultMaxMovements = 10000
)

// Media types a submission may have.
const (
	typeJSON   = "application/json"
	typeNDJSON = "application/x-ndjson"
	typeJSONL  = "application/jsonl"
)

// readItems reads a request body and splits it into movements (see
// splitBody), with the size limits applied.
func readItems(w http.ResponseWriter, r *http.Request, maxReq int64, maxItems int) (items [][]byte, lines []int, herr *httpError) {
	ct, herr := mediaType(r.Header.Get("Content-Type"))
	if herr != nil {
		return nil, nil, herr
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReq))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, nil, refuse(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes: send fewer movements per request", maxReq)
	}
	if err != nil {
		return nil, nil, refuse(http.StatusBadRequest, "reading the request body: %v", err)
	}
	return splitBody(body, ct, maxItems)
}

// mediaType is the media type of a submission's Content-Type header, or
// the refusal of one the intake does not take.
func mediaType(header string) (string, *httpError) {
	switch header {
	case typeJSON, typeNDJSON, typeJSONL:
		return header, nil // what clients send; nothing to parse
	}
	ct, params, err := mime.ParseMediaType(header)
	if err != nil || (ct != typeJSON && ct != typeNDJSON && ct != typeJSONL) {
		return "", refuse(http.StatusUnsupportedMediaType, "Content-Type must be %s (one movement or an array of them), %s or %s (one movement per line)", typeJSON, typeNDJSON, typeJSONL)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return "", refuse(http.StatusUnsupportedMediaType, "the body must be UTF-8 (charset=utf-8 or none)")
	}
	return ct, nil
}

// splitBody splits a body of media type ct into movements: one JSON
// object or a JSON array of objects (application/json), or one object per
// line (NDJSON, JSON lines). lines[i] is the body line where item i starts
// (NDJSON only). The items are slices of body. A body that is not UTF-8 is
// refused, never repaired, and one of more than maxItems movements is
// refused as soon as the count is passed.
func splitBody(body []byte, ct string, maxItems int) (items [][]byte, lines []int, herr *httpError) {
	if !utf8.Valid(body) {
		return nil, nil, refuse(http.StatusBadRequest, "the body is not valid UTF-8: send UTF-8 text (nothing was stored)")
	}
	tooMany := func() *httpError {
		return refuse(http.StatusRequestEntityTooLarge, "more than %d movements in one request: send them in several", maxItems)
	}
	if ct == typeNDJSON || ct == typeJSONL {
		var ok bool
		if items, lines, ok = splitLines(body, maxItems); !ok {
			return nil, nil, tooMany()
		}
	} else {
		trimmed := bytes.TrimLeft(body, " \t\r\n")
		switch {
		case len(trimmed) == 0:
			return nil, nil, refuse(http.StatusBadRequest, "empty request: send a movement object, an array of them, or NDJSON with Content-Type application/x-ndjson")
		case trimmed[0] == '[':
			var err error
			items, err = splitArray(trimmed, maxItems)
			if errors.Is(err, errTooMany) {
				return nil, nil, tooMany()
			}
			if err != nil {
				return nil, nil, refuse(http.StatusBadRequest, "the body is not a valid JSON array of movements: %v", err)
			}
		default:
			items = [][]byte{body}
		}
	}
	if len(items) == 0 {
		return nil, nil, refuse(http.StatusBadRequest, "the request holds no movements")
	}
	return items, lines, nil
}

// errTooMany is a body with more items than allowed.
var errTooMany = errors.New("too many movements")

// capErrors keeps the first MaxErrors of errs in body and counts them all.
func (b *ErrorBody) capErrors(errs []ItemError, total int) {
	b.ErrorsTotal = total
	if len(errs) > MaxErrors {
		errs = errs[:MaxErrors]
	}
	b.Errors = errs
	b.Truncated = total > len(errs)
}

// oversize lists the first MaxErrors items larger than maxMov, and counts
// them all.
func oversize(items [][]byte, lines []int, maxMov int64) (big []ItemError, total int) {
	for i, it := range items {
		if int64(len(it)) > maxMov {
			total++
			if len(big) < MaxErrors {
				big = append(big, ItemError{Item: i, Line: lineOf(lines, i), Error: fmt.Sprintf("movement is %d bytes, more than the limit of %d", len(it), maxMov)})
			}
		}
	}
	return big, total
}

func lineOf(lines []int, i int) int {
	if i < len(lines) {
		return lines[i]
	}
	return 0
}

// splitLines splits NDJSON into its non-empty lines, slices of body; ok is
// false when there are more than maxItems.
func splitLines(body []byte, maxItems int) (items [][]byte, lines []int, ok bool) {
	n := 0
	for len(body) > 0 {
		n++
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(items) == maxItems {
			return nil, nil, false
		}
		items = append(items, line)
		lines = append(lines, n)
	}
	return items, lines, true
}

// splitArray splits a JSON array into its elements; errTooMany when there
// are more than maxItems.
func splitArray(body []byte, maxItems int) ([][]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return nil, errors.New("malformed array")
	}
	var items [][]byte
	for dec.More() {
		if len(items) == maxItems {
			return nil, errTooMany
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("item %d is malformed", len(items))
		}
		items = append(items, raw)
	}
	if _, err := dec.Token(); err != nil {
		return nil, errors.New("the array is not closed")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the array")
	}
	return items, nil
}

// prepare validates every item as every intake does (intake.Formulary's
// Prepare); it returns the prepared movements, or the first MaxErrors
// field errors and the count of them all. unitOnly is true when every
// error is a unit other than the formulary's.
func prepare(fm intake.Formulary, items [][]byte, lines []int, storeID string, now time.Time) (out []movement.Prepared, errs []ItemError, total int, unitOnly bool) {
	out = make([]movement.Prepared, len(items))
	unitOnly = true
	for i, it := range items {
		p, es, unit := fm.PrepareJSON(it, storeID, now)
		unitOnly = unitOnly && (es == nil || unit)
		for _, e := range es {
			total++
			if len(errs) < MaxErrors {
				errs = append(errs, ItemError{Item: i, Line: lineOf(lines, i), Field: e.Field, Error: e.Msg})
			}
		}
		out[i] = p
	}
	return out, errs, total, unitOnly && total > 0
}

// enqueueError turns a queue error into the HTTP refusal.
func enqueueError(err error, lines []int) *httpError {
	var ce *queue.ConflictError
	var pe *queue.PurgedError
	switch {
	case errors.As(err, &ce):
		e := refuse(http.StatusConflict, "movement %d has the movement_id of a %s with different content; nothing was stored", ce.Index, conflictWith(ce, ce.Other))
		e.body.Key = hexKey(ce.Key)
		e.body.Errors = []ItemError{{Item: ce.Index, Line: lineOf(lines, ce.Index), Field: "movement_id", Error: "already used by a movement with different content"}}
		return e
	case errors.As(err, &pe):
		e := refuse(http.StatusConflict, "movement %d was purged by an operator and cannot be submitted again; nothing was stored", pe.Index)
		e.body.Key = hexKey(pe.Key)
		e.body.Errors = []ItemError{{Item: pe.Index, Line: lineOf(lines, pe.Index), Field: "movement_id", Error: "purged by an operator"}}
		return e
	case errors.Is(err, queue.ErrDiskFull):
		return refuse(http.StatusInsufficientStorage, "the agent's disk is full: nothing was stored; free space on the data disk, then resubmit (movements already accepted are safe)")
	case errors.Is(err, queue.ErrClosed):
		return refuse(http.StatusServiceUnavailable, "the agent is shutting down: resubmit after it restarts")
	case errors.Is(err, queue.ErrReadOnly):
		return refuse(http.StatusServiceUnavailable, "the data file is open read-only")
	}
	return refuse(http.StatusInternalServerError, "storing the movements failed: %v", err)
}

// ItemResult is the per-movement answer of a partial submission (used by
// `agent enqueue`): each movement is stored or refused on its own.
type ItemResult struct {
	Item       int         `json:"item"`
	Line       int         `json:"line,omitempty"`
	MovementID string      `json:"movement_id,omitempty"`
	Key        string      `json:"key,omitempty"`
	Status     string      `json:"status"` // accepted, duplicate, rejected
	Errors     []ItemError `json:"errors,omitempty"`
}

// Item statuses of a partial submission.
const (
	StatusAccepted  = "accepted"
	StatusDuplicate = "duplicate"
	StatusRejected  = "rejected"
)

// submitEach stores every valid movement and refuses the others one by
// one: invalid ones, and those that conflict with a held movement, were
// purged, or conflict with an earlier one of the request. The valid ones
// are stored in one transaction. Every answer numbers items as the request
// does, invalid ones included. Only the first MaxErrors field errors are
// spelled out; a rejected item past them has its status and no errors.
func submitEach(q *queue.Queue, fm intake.Formulary, items [][]byte, lines []int, maxMov int64, storeID string, now time.Time) ([]ItemResult, error) {
	res := make([]ItemResult, len(items))
	var valid []movement.Prepared
	var index []int // valid[j] is item index[j]
	spelled := 0
	spell := func(i int, e ItemError) {
		if spelled < MaxErrors {
			spelled++
			res[i].Errors = append(res[i].Errors, e)
		}
	}
	for i, it := range items {
		res[i] = ItemResult{Item: i, Line: lineOf(lines, i)}
		if int64(len(it)) > maxMov {
			res[i].Status = StatusRejected
			spell(i, ItemError{Item: i, Line: res[i].Line, Error: fmt.Sprintf("movement is %d bytes, more than the limit of %d", len(it), maxMov)})
			continue
		}
		p, es, _ := fm.PrepareJSON(it, storeID, now)
		if es != nil {
			res[i].Status = StatusRejected
			for _, e := range es {
				spell(i, ItemError{Item: i, Line: lineOf(lines, i), Field: e.Field, Error: e.Msg})
			}
			continue
		}
		res[i].MovementID, res[i].Key = p.MovementID, p.KeyString()
		valid = append(valid, p)
		index = append(index, i)
	}
	if len(valid) == 0 {
		return res, nil
	}
	out, err := q.EnqueueEach(valid)
	if err != nil {
		return nil, err
	}
	for j, r := range out {
		i := index[j]
		var ce *queue.ConflictError
		var pe *queue.PurgedError
		why := ""
		switch {
		case r.Err == nil && r.Duplicate:
			res[i].Status = StatusDuplicate
			continue
		case r.Err == nil:
			res[i].Status = StatusAccepted
			continue
		case errors.As(r.Err, &ce):
			why = "movement_id already used by a " + conflictWith(ce, index[ce.Other]) + " with different content"
		case errors.As(r.Err, &pe):
			why = "purged by an operator; cannot be submitted again"
		default:
			return nil, r.Err
		}
		res[i].Status = StatusRejected
		spell(i, ItemError{Item: i, Line: lineOf(lines, i), Field: "movement_id", Error: why})
	}
	return res, nil
}

// conflictWith names what a conflicting movement conflicts with; other is
// the client's number for the item ce.Other.
func conflictWith(ce *queue.ConflictError, other int) string {
	if ce.State == 0 {
		return fmt.Sprintf("movement earlier in this submission (item %d)", other)
	}
	return ce.State.String() + " movement"
}

func hexKey(k [16]byte) string { return hex.EncodeToString(k[:]) }

// bearer extracts a bearer token.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}
