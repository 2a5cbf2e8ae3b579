package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/rxedge/agent/internal/logging"
)

// newLogger is the log of a long-running command (sink, witness): JSON
// lines on w, as the store's agent writes them, so one collector reads
// both binaries; under systemd each line starts with its syslog priority,
// so the journal records the level.
func newLogger(w io.Writer) *slog.Logger {
	f, isFile := w.(*os.File)
	return slog.New(logging.New(w, logging.Options{Format: logging.JSON, Journal: isFile && logging.IsJournal(f)}))
}
