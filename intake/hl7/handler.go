package hl7

import (
	"errors"
	"log/slog"
	"time"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// Handler turns one HL7 message into movements, stores them through the
// sink's group commit and builds the acknowledgement. It is safe for
// concurrent use: every connection calls it, and concurrent messages share
// commits.
type Handler struct {
	Sink      *intake.Sink
	Formulary intake.Formulary
	// Location is the zone of times sent without an offset. Default
	// time.Local, the pharmacy PC's zone.
	Location *time.Location
	Counter  *intake.Counter
	Log      *slog.Logger
}

// Outcome is what became of one message.
type Outcome struct {
	Code       string // AA, AE or AR
	Accepted   int
	Duplicates int
	// Err is the first error of a message answered AE or AR, and Errors
	// the number the answer lists.
	Err    *Error
	Errors int
}

// Handle processes one message and returns the acknowledgement to send.
// The AA is built only after the commit holding the message's movements
// was fsynced; an AE or AR means nothing of the message was stored.
func (h *Handler) Handle(raw []byte) ([]byte, Outcome) {
	now := h.Sink.Now()
	m, err := Parse(raw)
	if err != nil {
		return h.refuse(ackHeader{}, AR, now, asErrors(err), 1)
	}
	hdr := header(m)
	msh := m.MSH()
	if hdr.controlID == "" {
		return h.refuse(hdr, AR, now, []*Error{{Loc: Location{Segment: "MSH", Seq: 1, Field: 10}, Code: CodeRequiredMissing, Msg: "the message control id is required"}}, 1)
	}
	typ, _ := m.Get(msh, 9, 1, 1, 0)
	if typ != "RDS" || !dispenseTriggers[hdr.trigger] {
		return h.refuse(hdr, AR, now, []*Error{{Loc: Location{Segment: "MSH", Seq: 1, Field: 9}, Code: CodeUnsupportedType, Msg: "only RDS^O13 and RDS^O01 are taken"}}, 1)
	}
	// Every problem is answered, each in its own ERR: those of mapping
	// the segments, then those of validating what did map.
	ds, errs := Dispenses(m, h.Formulary, h.loc())
	items := make([]movement.Prepared, len(ds))
	for i, d := range ds {
		if len(errs) >= MaxErrors {
			break // refused already: the answer lists the first MaxErrors
		}
		p, es, _ := h.Formulary.Prepare(d.Movement, h.Sink.StoreID, now)
		for _, e := range es {
			errs = append(errs, &Error{Loc: d.where(e.Field), Code: fieldCode(e), Msg: e.Field + " " + e.Msg})
		}
		items[i] = p
	}
	if len(errs) > 0 {
		return h.refuse(hdr, AE, now, errs[:min(len(errs), MaxErrors)], max(len(ds), 1))
	}
	res, err := h.Sink.Enqueue(items)
	if err != nil {
		var ce *queue.ConflictError
		var pe *queue.PurgedError
		switch {
		case errors.As(err, &ce):
			return h.refuse(hdr, AE, now, []*Error{{Loc: ds[ce.Index].where("movement_id"), Code: CodeDuplicateKey, Msg: "this dispense (prescription number and sub-ID) was stored before with different content"}}, len(ds))
		case errors.As(err, &pe):
			return h.refuse(hdr, AE, now, []*Error{{Loc: ds[pe.Index].where("movement_id"), Code: CodeDuplicateKey, Msg: "this dispense was purged by an operator and cannot be sent again"}}, len(ds))
		case errors.Is(err, queue.ErrDiskFull):
			return h.refuse(hdr, AR, now, []*Error{{Loc: Location{Segment: "MSH", Seq: 1}, Code: CodeInternal, Msg: "the agent's disk is full: nothing was stored, send again later"}}, len(ds))
		case errors.Is(err, queue.ErrClosed):
			return h.refuse(hdr, AR, now, []*Error{{Loc: Location{Segment: "MSH", Seq: 1}, Code: CodeInternal, Msg: "the agent is shutting down: nothing was stored, send again later"}}, len(ds))
		}
		h.log().Warn("HL7_STORE_FAILED", "error", err.Error())
		return h.refuse(hdr, AR, now, []*Error{{Loc: Location{Segment: "MSH", Seq: 1}, Code: CodeInternal, Msg: "storing the dispenses failed: nothing was stored, send again later"}}, len(ds))
	}
	out := Outcome{Code: AA}
	for _, r := range res {
		if r.Duplicate {
			out.Duplicates++
		} else {
			out.Accepted++
		}
	}
	h.Counter.Add(out.Accepted, out.Duplicates, 0, now)
	return buildAck(hdr, AA, h.Sink.StoreID, now, nil), out
}

// fieldCode is the table 0357 code of a movement's field problem, by its
// kind: a required field missing (101), a value not in the field's table
// or not the formulary's unit (103), else a data type error (102).
func fieldCode(e movement.FieldError) string {
	switch {
	case errors.Is(e, movement.ErrRequired):
		return CodeRequiredMissing
	case errors.Is(e, movement.ErrNotAllowed), errors.Is(e, intake.ErrOtherUnit):
		return CodeTableValue
	}
	return CodeDataType
}

// refuse answers a message with code and errs, counting n dispenses
// rejected. The refusal is logged by the listener, which knows the
// sender, in aggregate.
func (h *Handler) refuse(hdr ackHeader, code string, now time.Time, errs []*Error, n int) ([]byte, Outcome) {
	h.Counter.Add(0, 0, n, now)
	return buildAck(hdr, code, h.Sink.StoreID, now, errs), Outcome{Code: code, Err: errs[0], Errors: len(errs)}
}

func (h *Handler) loc() *time.Location {
	if h.Location == nil {
		return time.Local
	}
	return h.Location
}

func (h *Handler) log() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

func asErrors(err error) []*Error {
	var e *Error
	if errors.As(err, &e) {
		return []*Error{e}
	}
	return []*Error{{Loc: Location{Segment: "MSH", Seq: 1}, Code: CodeSegmentSequence, Msg: "malformed message"}}
}
