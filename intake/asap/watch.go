package asap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// Folders under the drop folder.
const (
	DoneDir     = "done"
	RejectedDir = "rejected"
)

// ChunkRecords is how many movements of a file go in one submission.
const ChunkRecords = 5000

// MaxReportedRecords bounds the refused records a report lists; those past
// it are counted (Report.RejectedNotListed), so a report's size does not
// grow with a file of refused records.
const MaxReportedRecords = 10000

// Watcher takes complete ASAP files from a folder. One goroutine (Run)
// owns the folder and the watcher: files are taken one at a time, in name
// order, and Scan must not be called concurrently.
type Watcher struct {
	Dir          string
	Sink         *intake.Sink
	Formulary    intake.Formulary
	Location     *time.Location // of dates filled; default time.Local
	Counter      *intake.Counter
	Log          *slog.Logger
	Poll         time.Duration
	MaxFileBytes int64

	// notes are the files of the folder set aside, by name, with why:
	// each is counted and logged when it is set aside for a reason, and
	// forgotten once taken or gone.
	notes map[string]string
	// asideLogged counts the files set aside in this scan.
	asideLogged int
}

// Report is what became of one file; a rejected file's report is written
// next to it as NAME.report.json. It holds record numbers and field
// names, never values.
type Report struct {
	File       string         `json:"file"`
	Version    string         `json:"version,omitempty"`
	Records    int            `json:"records"`
	Stored     int            `json:"stored"`
	Duplicates int            `json:"duplicates"`
	Rejected   []RecordReport `json:"rejected,omitempty"`
	// RejectedNotListed counts the refused records past the first
	// MaxReportedRecords, which Rejected lists.
	RejectedNotListed int `json:"rejected_not_listed,omitempty"`
	// Errors are problems with the file as a whole: nothing of it was
	// stored.
	Errors []FileError `json:"errors,omitempty"`
}

// reject adds a refused record: listed while there are fewer than
// MaxReportedRecords, counted after.
func (r *Report) reject(rr RecordReport) {
	if len(r.Rejected) < MaxReportedRecords {
		r.Rejected = append(r.Rejected, rr)
		return
	}
	r.RejectedNotListed++
}

// rejected counts the refused records, listed or not.
func (r *Report) rejected() int { return len(r.Rejected) + r.RejectedNotListed }

// RecordReport lists the field errors of one rejected record.
type RecordReport struct {
	Record  int          `json:"record"`  // the DSP's number in the file, from 1
	Segment int          `json:"segment"` // its position among the file's segments
	Errors  []FieldError `json:"errors"`
}

// FileError is a problem with the file as a whole.
type FileError struct {
	Segment int    `json:"segment,omitempty"`
	Field   string `json:"field"`
	Error   string `json:"error"`
}

// Prepare makes the done and rejected folders.
func (w *Watcher) Prepare() error {
	for _, d := range []string{w.Dir, filepath.Join(w.Dir, DoneDir), filepath.Join(w.Dir, RejectedDir)} {
		if err := os.MkdirAll(d, 0o770); err != nil {
			return fmt.Errorf("intake.asap.dir: %w", err)
		}
	}
	return nil
}

// Run takes files until ctx ends. It returns soon after ctx ends, even
// mid-file: nothing in a scan waits without a bound (a file is opened
// without blocking and read only when it is a regular file), and ctx is
// looked at before each file and each submission.
func (w *Watcher) Run(ctx context.Context) error {
	if err := w.Prepare(); err != nil {
		return err
	}
	t := time.NewTicker(w.poll())
	defer t.Stop()
	for {
		if _, err := w.Scan(ctx); err != nil && ctx.Err() == nil {
			w.log().Warn("ASAP_SCAN_FAILED", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Scan takes every complete file in the folder once, in name order, and
// returns their reports. A file without its TT trailer is left for a
// later scan; so is a file it cannot take (see setAside), which does not
// keep it from the files after it. It returns an error only when the
// folder cannot be read or the queue cannot store (a full disk, a closed
// queue): nothing a file holds ends a scan.
func (w *Watcher) Scan(ctx context.Context) ([]Report, error) {
	ents, err := os.ReadDir(w.Dir)
	if err != nil {
		return nil, err
	}
	present := make(map[string]bool, len(ents))
	var names []string
	for _, e := range ents {
		n := e.Name()
		present[n] = true
		switch {
		case strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".tmp") || strings.HasSuffix(n, ".part"):
		case e.IsDir() && (n == DoneDir || n == RejectedDir):
		case !e.Type().IsRegular():
			w.setAside(n, reasonNotRegular, fmt.Errorf("a %s", kind(e.Type())))
		default:
			names = append(names, n)
		}
	}
	defer w.forget(present)
	slices.Sort(names)
	var out []Report
	for _, n := range names {
		if ctx.Err() != nil {
			break
		}
		rep, taken, err := w.take(ctx, n)
		if err != nil {
			return out, err
		}
		if taken {
			out = append(out, rep)
		}
	}
	return out, nil
}

// take processes one file, as it was opened: taken is false when it is
// not complete yet, when it was set aside, or when ctx ended before all
// of it was stored; err is the queue's failure to store. The file moves
// to done/ only after every movement in it is in an fsynced commit; a
// crash before the move leaves it in place, and taking it again finds its
// movements held (duplicates), so nothing is stored twice.
func (w *Watcher) take(ctx context.Context, name string) (Report, bool, error) {
	rep := Report{File: name}
	o := w.open(name)
	if o == nil {
		return rep, false, nil
	}
	defer o.f.Close()
	if o.fi.Size() > w.maxBytes() {
		rep.Errors = []FileError{{Field: "file", Error: fmt.Sprintf("larger than intake.asap.max_file_bytes (%d)", w.maxBytes())}}
		return rep, w.finish(o, &rep, true), nil
	}
	if !w.read(o) {
		return rep, false, nil
	}
	if !Complete(o.b) {
		delete(w.notes, name)
		return rep, false, nil
	}
	now := w.Sink.Now()
	f, err := Parse(o.b)
	if err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			rep.Errors = []FileError{{Segment: pe.Segment, Field: pe.Field, Error: pe.FieldError.Error}}
		} else {
			rep.Errors = []FileError{{Field: "file", Error: "malformed"}}
		}
		taken := w.finish(o, &rep, true)
		if taken {
			w.Counter.Add(0, 0, 1, now)
		}
		return rep, taken, nil
	}
	rep.Version = f.Version
	if done, err := w.store(ctx, name, f, now, &rep); !done || err != nil {
		return rep, false, err
	}
	w.Counter.Add(rep.Stored, rep.Duplicates, rep.rejected(), now)
	return rep, w.finish(o, &rep, rep.rejected() > 0), nil
}

// prepare validates each record's movement as the HTTP intake does, and
// returns those that pass with the index of their record; the others get
// their field errors.
func (w *Watcher) prepare(recs []Record, now time.Time) (items []movement.Prepared, index []int) {
	for i := range recs {
		r := &recs[i]
		if r.Movement == nil {
			continue
		}
		p, es, _ := w.Formulary.Prepare(r.Movement, w.Sink.StoreID, now)
		for _, e := range es {
			r.Errors = append(r.Errors, FieldError{Field: fieldOf(e.Field), Error: e.Field + " " + e.Msg})
		}
		if es != nil {
			continue
		}
		items = append(items, p)
		index = append(index, i)
	}
	return items, index
}

// store maps the file's records and commits them ChunkRecords at a time,
// counting what was stored and duplicated into rep and listing refused
// records: a chunk's records are all that is held of the file's records
// at once. It reports done false when it stopped before the end (ctx
// ended, or a chunk failed with err): the file then stays to be taken
// again, its stored records coming back as duplicates.
func (w *Watcher) store(ctx context.Context, name string, f *File, now time.Time, rep *Report) (done bool, err error) {
	chunk := make([]Record, 0, min(f.DSPCount, ChunkRecords))
	for r := range EachRecord(f, w.Formulary, w.loc()) {
		if chunk = append(chunk, r); len(chunk) < ChunkRecords {
			continue
		}
		if done, err := w.storeChunk(ctx, name, chunk, now, rep); !done || err != nil {
			return done, err
		}
		chunk = chunk[:0]
	}
	if len(chunk) == 0 {
		return true, nil
	}
	return w.storeChunk(ctx, name, chunk, now, rep)
}

// storeChunk commits one chunk of records, each on its own, and adds the
// outcome to rep.
func (w *Watcher) storeChunk(ctx context.Context, name string, recs []Record, now time.Time, rep *Report) (done bool, err error) {
	items, index := w.prepare(recs, now)
	if ctx.Err() != nil {
		return false, nil
	}
	if len(items) > 0 {
		res, err := w.Sink.EnqueueEach(items)
		if err != nil {
			// Nothing of this chunk stored.
			return false, fmt.Errorf("store %s: %w", name, err)
		}
		for j, r := range res {
			rec := &recs[index[j]]
			var ce *queue.ConflictError
			var pe *queue.PurgedError
			switch {
			case r.Err == nil && r.Duplicate:
				rep.Duplicates++
			case r.Err == nil:
				rep.Stored++
			case errors.As(r.Err, &ce):
				rec.Errors = append(rec.Errors, FieldError{Field: "DSP02", Error: "this dispense (prescription number, refill number, date filled) was stored before with different content"})
			case errors.As(r.Err, &pe):
				rec.Errors = append(rec.Errors, FieldError{Field: "DSP02", Error: "this dispense was purged by an operator and cannot be sent again"})
			default:
				return false, fmt.Errorf("store %s: %w", name, r.Err)
			}
		}
	}
	rep.Records += len(recs)
	for _, r := range recs {
		if len(r.Errors) > 0 {
			rep.reject(RecordReport{Record: r.Number, Segment: r.Segment, Errors: r.Errors})
		}
	}
	return true, nil
}

func (w *Watcher) poll() time.Duration {
	if w.Poll <= 0 {
		return intake.DefaultPollInterval
	}
	return w.Poll
}

func (w *Watcher) maxBytes() int64 {
	if w.MaxFileBytes <= 0 {
		return intake.DefaultMaxFileBytes
	}
	return w.MaxFileBytes
}

func (w *Watcher) loc() *time.Location {
	if w.Location == nil {
		return time.Local
	}
	return w.Location
}

func (w *Watcher) log() *slog.Logger {
	if w.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Log
}
