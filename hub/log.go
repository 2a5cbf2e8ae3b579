package hub

import (
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
)

// logger passes the server's log to an optional logger and keeps the first
// fatal message, which the server otherwise reports only by logging (and,
// with its own loggers, by exiting the process).
type logger struct {
	next server.Logger

	mu    sync.Mutex
	first error
}

func newLogger(next server.Logger) *logger { return &logger{next: next} }

func (l *logger) fatal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

func (l *logger) Fatalf(format string, v ...any) {
	l.mu.Lock()
	if l.first == nil {
		l.first = errors.New(fmt.Sprintf(format, v...))
	}
	l.mu.Unlock()
	if l.next != nil {
		l.next.Errorf(format, v...)
	}
}

func (l *logger) Noticef(format string, v ...any) {
	if l.next != nil {
		l.next.Noticef(format, v...)
	}
}

func (l *logger) Warnf(format string, v ...any) {
	if l.next != nil {
		l.next.Warnf(format, v...)
	}
}

func (l *logger) Errorf(format string, v ...any) {
	if l.next != nil {
		l.next.Errorf(format, v...)
	}
}

func (l *logger) Debugf(format string, v ...any) {
	if l.next != nil {
		l.next.Debugf(format, v...)
	}
}

func (l *logger) Tracef(format string, v ...any) {
	if l.next != nil {
		l.next.Tracef(format, v...)
	}
}
