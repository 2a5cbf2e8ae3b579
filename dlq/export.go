package dlq

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rxedge/agent/internal/disk"
	"github.com/rxedge/agent/queue"
)

// ExportRequest asks for quarantined movements, with their payloads, to be
// written out.
type ExportRequest struct {
	Filter
	Actor string
	// ReasonText is why, optional; recorded in the journal.
	ReasonText string
	// Dest names where the client writes the export (a file name, or
	// "stdout"); recorded in the journal so that an auditor can find it.
	Dest string
}

// Export is a journalled selection of quarantined movements, ready to be
// written out with Stream.
type Export struct {
	s       *Service
	storeID string
	keys    [][16]byte
}

// StartExport selects the movements that match the request's filter and
// journals the export (actor, keys, count, filter, destination) before
// anything is written out, so that no export leaves the agent unrecorded.
// A queue opened read-only cannot journal, and so cannot export.
func (s *Service) StartExport(rq ExportRequest) (*Export, error) {
	const op = "export"
	f, err := normalizeFilter(rq.Filter, op)
	if err != nil {
		return nil, err
	}
	recs, _, err := s.scan(f)
	if err != nil {
		return nil, fmt.Errorf("dlq: export: %w", err)
	}
	e := &Export{s: s, storeID: s.q.StoreID(), keys: make([][16]byte, len(recs))}
	keys := make([]string, len(recs))
	for i, r := range recs {
		e.keys[i] = r.Key
		keys[i] = r.KeyString()
	}
	detail := map[string]string{"filter": describeFilter(f)}
	if rq.Dest != "" {
		detail["dest"] = clipN(rq.Dest, 300)
	}
	ev := queue.Event{Action: queue.ActionExport, Actor: actorOr(rq.Actor), Reason: strings.TrimSpace(rq.ReasonText), Keys: keys, Count: len(keys), Detail: detail}
	if err := s.q.JournalWhole(ev); err != nil {
		return nil, fmt.Errorf("dlq: export: recording the export in the journal: %w", err)
	}
	return e, nil
}

// Len is the number of movements selected.
func (e *Export) Len() int { return len(e.keys) }

// Stream writes the selected movements to w as JSON lines, one Detail with
// its payload per line, oldest quarantine first, and returns how many it
// wrote. A movement redriven or purged since the selection is skipped.
// Each movement is read in its own read transaction, so a slow reader
// never holds the file.
func (e *Export) Stream(ctx context.Context, w io.Writer) (int, error) {
	n, _, err := e.s.writeDetails(ctx, w, e.storeID, e.keys)
	if err != nil {
		return n, fmt.Errorf("dlq: export: %d of %d movements written: %w", n, len(e.keys), err)
	}
	return n, nil
}

// Export journals and writes the quarantined movements that match the
// request to w (see StartExport and Stream).
func (s *Service) Export(ctx context.Context, w io.Writer, rq ExportRequest) (int, error) {
	e, err := s.StartExport(rq)
	if err != nil {
		return 0, err
	}
	return e.Stream(ctx, w)
}

// describe is a filter as recorded in the journal.
func describeFilter(f Filter) string {
	var parts []string
	if f.Reason != "" {
		parts = append(parts, "reason="+f.Reason)
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since="+f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "until="+f.Until.UTC().Format(time.RFC3339))
	}
	if f.Limit > 0 {
		parts = append(parts, fmt.Sprintf("limit=%d", f.Limit))
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, ",")
}

// writeDetails writes the movements of keys that are still quarantined as
// JSON lines with their payloads, and returns how many it wrote and which.
func (s *Service) writeDetails(ctx context.Context, w io.Writer, storeID string, keys [][16]byte) (int, [][16]byte, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	var written [][16]byte
	for i, k := range keys {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return len(written), written, err
			}
		}
		e, err := s.q.Get(k)
		if errors.Is(err, queue.ErrNotFound) {
			continue
		}
		if err != nil {
			return len(written), written, err
		}
		if e.State != queue.Quarantined || e.Record == nil {
			continue
		}
		if err := enc.Encode(s.detailOf(e.Record, storeID, true)); err != nil {
			return len(written), written, err
		}
		written = append(written, k)
	}
	return len(written), written, bw.Flush()
}

// PurgeRequest asks for quarantined movements to be removed for good.
type PurgeRequest struct {
	// Keys, All, Reason and Oldest select the movements to purge, as a
	// Selection does for a redrive.
	Keys   []string
	All    bool
	Reason string
	Oldest int
	Actor  string
	// ReasonText is why; required, recorded in the journal.
	ReasonText string
	// Confirm must be true: the API's --yes.
	Confirm bool
	// Dir is where the export file goes; default the data file's directory.
	Dir string
}

// PurgeResult says what a purge did.
type PurgeResult struct {
	// ExportFile holds every purged movement with its payload and failure
	// context; "" when nothing was quarantined.
	ExportFile string    `json:"export_file,omitempty"`
	Purged     []string  `json:"purged"`
	NotFound   []Missing `json:"not_found,omitempty"`
}

// Purge removes quarantined movements for good, after writing them to
// <Dir>/purged-<UTC time>.jsonl (mode 0600; the file and the directory
// fsynced; journalled as an export). Only movements in that file are
// purged. The queue journals
// each chunk with the actor, the reason text, the keys and the file's
// name, and marks the keys purged: they cannot be redriven or submitted
// again. It refuses, before doing anything, without keys, a reason text or
// Confirm. Keys that are not quarantined are reported in NotFound.
func (s *Service) Purge(ctx context.Context, rq PurgeRequest) (PurgeResult, error) {
	const op = "purge"
	res := PurgeResult{Purged: []string{}}
	sel, err := normalizeSelection(Selection{Keys: rq.Keys, All: rq.All, Reason: rq.Reason, Oldest: rq.Oldest}, op)
	if err != nil {
		return res, err
	}
	if len(sel.Keys) > 0 {
		if _, err := parseKeys(op, sel.Keys); err != nil {
			return res, err
		}
	}
	reasonText := strings.TrimSpace(rq.ReasonText)
	if reasonText == "" {
		return res, InputErrorf(op, "reason_text", "--reason-text", "is required: say why the movements are purged (it is recorded in the audit journal)")
	}
	if !rq.Confirm {
		return res, InputErrorf(op, "confirm", "--yes", "is required: a purge removes movements for good (they are exported to a file first); confirm it")
	}
	targets, missing, err := s.resolve(op, sel)
	if err != nil {
		return res, err
	}
	res.NotFound = missing
	if len(targets) == 0 {
		return res, nil
	}
	keys := make([][16]byte, len(targets))
	for i, t := range targets {
		keys[i] = t.key
	}
	dir := rq.Dir
	if dir == "" {
		dir = s.dataDir()
	}
	path, exported, err := s.writePurgeFile(ctx, dir, keys, actorOr(rq.Actor), reasonText)
	if err != nil {
		return res, fmt.Errorf("dlq: purge: exporting the movements first failed, nothing was purged: %w", err)
	}
	res.ExportFile = path
	if len(exported) < len(keys) {
		// Redriven or purged by someone else between the selection and
		// the export: not in the file, so not purged here.
		in := make(map[[16]byte]bool, len(exported))
		for _, k := range exported {
			in[k] = true
		}
		for _, k := range keys {
			if !in[k] {
				res.NotFound = append(res.NotFound, Missing{Key: keyString(k), State: s.stateOf(k)})
			}
		}
	}
	chunks := (len(exported) + s.chunk - 1) / s.chunk
	for i := 0; i < chunks; i++ {
		part := exported[i*s.chunk : min((i+1)*s.chunk, len(exported))]
		d := map[string]string{"export_file": filepath.Base(path)}
		if chunks > 1 {
			d["batch"] = fmt.Sprintf("%d/%d", i+1, chunks)
		}
		pr, err := s.q.Purge(queue.Purge{Keys: part, Actor: actorOr(rq.Actor), Reason: reasonText, Detail: d})
		if err != nil {
			return res, fmt.Errorf("dlq: purge: %d of %d movements were purged before this failed (all %d are in %s): %w", len(res.Purged), len(exported), len(exported), path, err)
		}
		for _, k := range pr.Purged {
			res.Purged = append(res.Purged, keyString(k))
		}
		for _, k := range pr.NotFound {
			res.NotFound = append(res.NotFound, Missing{Key: keyString(k), State: s.stateOf(k)})
		}
	}
	return res, nil
}

// writePurgeFile writes the movements of keys to a new purge export file in
// dir, fsyncs it and the directory, and returns its path and the keys it
// holds. The export is journalled before the file is written, which also
// stops a read-only queue before any file exists. On failure it removes
// what it wrote.
func (s *Service) writePurgeFile(ctx context.Context, dir string, keys [][16]byte, actor, reason string) (string, [][16]byte, error) {
	f, path, err := createExclusive(dir, "purged-"+s.clock().UTC().Format("20060102T150405Z"), ".jsonl")
	if err != nil {
		return "", nil, err
	}
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = keyString(k)
	}
	ev := queue.Event{Action: queue.ActionExport, Actor: actor, Reason: reason, Keys: ks, Count: len(ks),
		Detail: map[string]string{"dest": filepath.Base(path), "for": "purge"}}
	if err := s.q.JournalWhole(ev); err != nil {
		f.Close()
		os.Remove(path)
		return "", nil, fmt.Errorf("recording the export in the journal: %w", err)
	}
	_, written, err := s.writeDetails(ctx, f, s.q.StoreID(), keys)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = disk.SyncDir(dir)
	}
	if err != nil {
		os.Remove(path)
		return "", nil, fmt.Errorf("write %s: %w", path, err)
	}
	return path, written, nil
}

// createExclusive creates dir/base+ext, or dir/base-2+ext and so on when it
// exists, readable and writable by its owner only.
func createExclusive(dir, base, ext string) (*os.File, string, error) {
	for i := 1; i <= 100; i++ {
		name := base + ext
		if i > 1 {
			name = fmt.Sprintf("%s-%d%s", base, i, ext)
		}
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return f, path, nil
	}
	return nil, "", fmt.Errorf("%s: too many export files of the same second", filepath.Join(dir, base+ext))
}
