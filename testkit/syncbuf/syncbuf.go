// Package syncbuf is a buffer that goroutines may write to while a test
// reads it: the agent's log lines, a child process's output.
package syncbuf

import (
	"bytes"
	"strings"
	stdsync "sync"
)

// Buffer is a bytes.Buffer safe for concurrent use.
type Buffer struct {
	mu  stdsync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail returns the last n lines written.
func (b *Buffer) Tail(n int) string {
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
