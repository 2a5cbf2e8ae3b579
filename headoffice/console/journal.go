package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	stdsync "sync"
)

// FileJournal is a Journal in a file of JSON lines, one entry a line,
// opened for appending only and synced after each entry: an entry
// recorded is on disk before the action it announces is sent.
//
// Ownership: writes go through the mutex; the file is only appended to.
type FileJournal struct {
	mu   stdsync.Mutex
	f    *os.File
	path string
}

// MaxJournalEntry bounds one entry's line.
const MaxJournalEntry = 64 << 10

// journalTail is how much of the file's end Recent reads.
const journalTail = 1 << 20

// OpenFileJournal opens (or creates, mode 0600) the journal at path.
func OpenFileJournal(path string) (*FileJournal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("console: open the journal: %w", err)
	}
	return &FileJournal{f: f, path: path}, nil
}

// Record appends e and syncs the file.
func (j *FileJournal) Record(_ context.Context, e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if len(b) >= MaxJournalEntry {
		return fmt.Errorf("console: a journal entry of %d bytes is over %d", len(b), MaxJournalEntry)
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(b); err != nil {
		return fmt.Errorf("console: write the journal %s: %w", j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("console: sync the journal %s: %w", j.path, err)
	}
	return nil
}

// Recent reads the newest entries about store from the file's last
// journalTail bytes.
func (j *FileJournal) Recent(_ context.Context, store string, limit int) ([]Entry, error) {
	f, err := os.Open(j.path)
	if err != nil {
		return nil, fmt.Errorf("console: read the journal: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-journalTail, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return nil, fmt.Errorf("console: read the journal: %w", err)
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:] // a partial first line
		}
	}
	var out []Entry
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	for i := len(lines) - 1; i >= 0 && len(out) < limit; i-- {
		var e Entry
		if json.Unmarshal(lines[i], &e) != nil {
			continue // a torn last line after a crash
		}
		if store == "" || slices.Contains(e.Stores, store) {
			out = append(out, e)
		}
	}
	return out, nil
}

// Close closes the file.
func (j *FileJournal) Close() error { return j.f.Close() }
