// Package logging builds the agent's log handler: JSON or text lines on a
// writer (stderr), and, when that writer is journald's stream, each line
// prefixed with its syslog priority ("<4>" for a warning), which journald
// strips and records, so `journalctl -p warning` selects by level. It adds
// no attribute of its own: what a line carries is the caller's (never
// payload data, DESIGN P6).
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
)

// Formats.
const (
	JSON = "json"
	Text = "text"
)

// Options configure New.
type Options struct {
	Format string     // JSON (default) or Text
	Level  slog.Level // least level written
	// Journal prefixes each line with its syslog priority; see
	// JournalStream.
	Journal bool
}

// New returns a handler writing one line per record to w.
func New(w io.Writer, o Options) slog.Handler {
	mk := func(w io.Writer) slog.Handler {
		ho := &slog.HandlerOptions{Level: o.Level}
		if o.Format == Text {
			return slog.NewTextHandler(w, ho)
		}
		return slog.NewJSONHandler(w, ho)
	}
	if !o.Journal {
		return mk(w)
	}
	h := &journalHandler{}
	for i, p := range priorities {
		h.by[i] = mk(&prefixWriter{w: w, prefix: []byte("<" + strconv.Itoa(p.priority) + ">")})
	}
	return h
}

// priorities map slog levels to syslog priorities, most severe first.
var priorities = [4]struct {
	level    slog.Level
	priority int
}{
	{slog.LevelError, 3}, // err
	{slog.LevelWarn, 4},  // warning
	{slog.LevelInfo, 6},  // info
	{slog.LevelDebug, 7}, // debug
}

func index(l slog.Level) int {
	for i, p := range priorities {
		if l >= p.level {
			return i
		}
	}
	return len(priorities) - 1
}

// journalHandler passes each record to the handler of its priority; the
// four share their writer and differ only in the prefix.
type journalHandler struct{ by [4]slog.Handler }

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.by[index(l)].Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.by[index(r.Level)].Handle(ctx, r)
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := &journalHandler{}
	for i := range h.by {
		n.by[i] = h.by[i].WithAttrs(as)
	}
	return n
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	n := &journalHandler{}
	for i := range h.by {
		n.by[i] = h.by[i].WithGroup(name)
	}
	return n
}

// prefixWriter writes prefix before each write. slog's handlers write a
// record in one call, under their own lock, so a line is never split.
type prefixWriter struct {
	w      io.Writer
	prefix []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	buf := make([]byte, 0, len(p.prefix)+len(b))
	buf = append(append(buf, p.prefix...), b...)
	if _, err := p.w.Write(buf); err != nil {
		return 0, err
	}
	return len(b), nil
}

// JournalStream reports whether a file with the given device and inode
// numbers is the stream journald connected, by the JOURNAL_STREAM variable
// ("device:inode") that systemd sets for a unit whose output goes to the
// journal. A redirected stderr no longer matches, so its lines stay plain.
func JournalStream(env string, dev, ino uint64) bool {
	d, i, ok := strings.Cut(env, ":")
	if !ok {
		return false
	}
	return d == fmt.Sprint(dev) && i == fmt.Sprint(ino)
}
