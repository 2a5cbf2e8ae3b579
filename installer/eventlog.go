package installer

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
)

// Event IDs written to the Windows Event Log (the ones kardianos's own
// Windows logger uses).
const (
	eventInfo    = 1
	eventWarning = 2
	eventError   = 3
)

// eventSink is the part of *eventlog.Log the handler uses.
type eventSink interface {
	Info(eid uint32, msg string) error
	Warning(eid uint32, msg string) error
	Error(eid uint32, msg string) error
}

// EventLogHandler returns a handler that passes every record to next and,
// when this process is a Windows service, also writes warnings, errors and
// the records marked with EventKey (start and stop) to the Application
// event log under source name, which install registered. Elsewhere it
// returns next itself: on Linux journald collects the JSON on stderr. Close
// the returned Closer when the agent exits.
func EventLogHandler(name string, next slog.Handler) (slog.Handler, io.Closer, error) {
	sink, closer, err := openEventLog(name)
	if err != nil || sink == nil {
		return next, nopCloser{}, err
	}
	return newEventHandler(next, sink), closer, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// eventHandler tees records to an event sink. Messages are formatted by a
// text handler sharing this handler's attributes and groups, without time
// and level, which the event log records itself.
type eventHandler struct {
	next slog.Handler
	sink eventSink
	text slog.Handler
	buf  *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func newEventHandler(next slog.Handler, sink eventSink) *eventHandler {
	buf := &lockedBuffer{}
	text := slog.NewTextHandler(&buf.Buffer, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
				return slog.Attr{}
			}
			return a
		},
	})
	return &eventHandler{next: next, sink: sink, text: text, buf: buf}
}

func (h *eventHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *eventHandler) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if h.next.Enabled(ctx, r.Level) {
		err = h.next.Handle(ctx, r)
	}
	if !forwarded(r) {
		return err
	}
	h.buf.mu.Lock()
	h.buf.Reset()
	h.text.Handle(ctx, r)
	msg := string(bytes.TrimSuffix(h.buf.Bytes(), []byte("\n")))
	h.buf.mu.Unlock()
	switch {
	case r.Level >= slog.LevelError:
		h.sink.Error(eventError, msg)
	case r.Level >= slog.LevelWarn:
		h.sink.Warning(eventWarning, msg)
	default:
		h.sink.Info(eventInfo, msg)
	}
	// A failing event log must not fail the agent's own logging.
	return err
}

// forwarded reports whether r belongs in the event log.
func forwarded(r slog.Record) bool {
	if r.Level >= slog.LevelWarn {
		return true
	}
	if r.Level < slog.LevelInfo {
		return false
	}
	marked := false
	r.Attrs(func(a slog.Attr) bool {
		marked = a.Key == EventKey
		return !marked
	})
	return marked
}

func (h *eventHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &eventHandler{next: h.next.WithAttrs(as), sink: h.sink, text: h.text.WithAttrs(as), buf: h.buf}
}

func (h *eventHandler) WithGroup(name string) slog.Handler {
	return &eventHandler{next: h.next.WithGroup(name), sink: h.sink, text: h.text.WithGroup(name), buf: h.buf}
}
