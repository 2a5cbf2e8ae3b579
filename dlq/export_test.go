package dlq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// readDetails decodes JSON lines of Details.
func readDetails(t *testing.T, data []byte) []Detail {
	t.Helper()
	var out []Detail
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var d Detail
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("line %d: %v: %s", len(out)+1, err, sc.Bytes())
		}
		out = append(out, d)
	}
	return out
}

func TestExportWritesContextAndPayloadAndJournalsFirst(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t,
		spec{id: "A", reason: "permanent:too_large", rxRef: "RX-A"},
		spec{id: "B", reason: "exhausted:timeout", note: "late"},
		spec{id: "C", reason: "permanent:conflict"},
	)
	var buf bytes.Buffer
	n, err := f.svc.Export(context.Background(), &buf, ExportRequest{Filter: Filter{Reason: "permanent"}, Actor: "local:dave", Dest: "q.jsonl"})
	if err != nil || n != 2 {
		t.Fatalf("Export = %d, %v; want 2", n, err)
	}
	ds := readDetails(t, buf.Bytes())
	if len(ds) != 2 || ds[0].Key != keys[0] || ds[1].Key != keys[2] {
		t.Fatalf("exported %+v, want keys %s, %s", ds, keys[0], keys[2])
	}
	if !strings.Contains(string(ds[0].Payload), `"rx_ref":"RX-A"`) || ds[0].Reason != "permanent:too_large" ||
		ds[0].StoreID != testStore || ds[0].Digest == "" || ds[0].ErrorText == "" || ds[0].Attempts != 1 {
		t.Errorf("line 1 = %+v", ds[0])
	}
	// The payload is the stored canonical movement: its digest matches.
	sum := movement.Digest(ds[0].Payload)
	if got, want := ds[0].Digest, hex.EncodeToString(sum[:]); got != want {
		t.Errorf("digest %s does not match the payload's %s", got, want)
	}
	evs := f.events(t, queue.ActionExport)
	if len(evs) != 1 || evs[0].Actor != "local:dave" || evs[0].Count != 2 || !slices.Equal(evs[0].Keys, []string{keys[0], keys[2]}) ||
		evs[0].Detail["filter"] != "reason=permanent" || evs[0].Detail["dest"] != "q.jsonl" {
		t.Errorf("journal = %+v", evs)
	}
	// Exporting changes nothing.
	for _, k := range keys {
		if s := f.state(t, k); s != queue.Quarantined {
			t.Errorf("%s is %s after export", k, s)
		}
	}
}

func TestExportNeedsAWritableFile(t *testing.T) {
	f := newFixture(t)
	f.quarantine(t, spec{id: "A"})
	ro := f.reopenReadOnly(t)
	var buf bytes.Buffer
	if _, err := New(ro).Export(context.Background(), &buf, ExportRequest{}); !errors.Is(err, queue.ErrReadOnly) {
		t.Fatalf("Export on a read-only file: %v, want ErrReadOnly", err)
	}
	if buf.Len() != 0 {
		t.Errorf("an export that could not be journalled wrote %d bytes", buf.Len())
	}
}

func TestPurgeRefusesWithoutReasonOrConfirmation(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A"})
	tests := []struct {
		name  string
		rq    PurgeRequest
		field string
		names string
	}{
		{"no reason text", PurgeRequest{Keys: keys, Confirm: true}, "reason_text", "--reason-text"},
		{"blank reason text", PurgeRequest{Keys: keys, ReasonText: " ", Confirm: true}, "reason_text", "--reason-text"},
		{"not confirmed", PurgeRequest{Keys: keys, ReasonText: "duplicate of paper record"}, "confirm", "--yes"},
		{"no selection", PurgeRequest{ReasonText: "x", Confirm: true}, "selection", "--all"},
		{"two selections", PurgeRequest{Keys: keys, All: true, ReasonText: "x", Confirm: true}, "selection", "ambiguous"},
		{"bad key", PurgeRequest{Keys: []string{"nope"}, ReasonText: "x", Confirm: true}, "keys", `"nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.svc.Purge(context.Background(), tt.rq)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != tt.field || !strings.Contains(err.Error(), tt.names) {
				t.Fatalf("error = %v, want an InputError on %s naming %s", err, tt.field, tt.names)
			}
		})
	}
	if s := f.state(t, keys[0]); s != queue.Quarantined {
		t.Errorf("the movement is %s after refused purges", s)
	}
	if files, _ := filepath.Glob(filepath.Join(f.dir, "purged-*")); len(files) != 0 {
		t.Errorf("refused purges wrote %v", files)
	}
	if n := len(f.events(t, queue.ActionPurge)); n != 0 {
		t.Errorf("%d purge events journalled", n)
	}
}

func TestPurgeExportsFirstAndTheKeyNeverComesBack(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t,
		spec{id: "A", rxRef: "RX-A"},
		spec{id: "B"},
		spec{id: "C"},
	)
	pending, _ := f.enqueue(t, spec{id: "P"})

	res, err := f.svc.Purge(context.Background(), PurgeRequest{
		Keys: []string{keys[0], keys[2], pending}, Actor: "local:erin", ReasonText: "entered twice", Confirm: true,
	})
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if !slices.Equal(res.Purged, []string{keys[0], keys[2]}) || !slices.Equal(res.NotFound, []Missing{{Key: pending, State: "pending"}}) {
		t.Fatalf("purge = %+v", res)
	}

	// The export file is in the data directory, private, and holds both
	// movements with their payloads.
	if filepath.Dir(res.ExportFile) != f.dir || !strings.HasPrefix(filepath.Base(res.ExportFile), "purged-20260301T120") {
		t.Errorf("export file %s, want purged-<time>.jsonl in %s", res.ExportFile, f.dir)
	}
	fi, err := os.Stat(res.ExportFile)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("export file mode %v, want 0600", fi.Mode().Perm())
	}
	data, err := os.ReadFile(res.ExportFile)
	if err != nil {
		t.Fatal(err)
	}
	ds := readDetails(t, data)
	if len(ds) != 2 || ds[0].Key != keys[0] || ds[1].Key != keys[2] || !strings.Contains(string(ds[0].Payload), "RX-A") {
		t.Errorf("export file holds %+v", ds)
	}

	for _, k := range []string{keys[0], keys[2]} {
		if s := f.state(t, k); s != queue.Purged {
			t.Errorf("%s is %s, want purged", k, s)
		}
	}
	if s := f.state(t, keys[1]); s != queue.Quarantined {
		t.Errorf("the movement not named is %s", s)
	}
	// The journal shows the export to the file before the purge.
	var order []string
	for _, e := range f.events(t, "") {
		if e.Action == queue.ActionExport || e.Action == queue.ActionPurge {
			order = append(order, e.Action+":"+e.Detail["dest"]+e.Detail["export_file"])
		}
	}
	base := filepath.Base(res.ExportFile)
	if want := []string{"export:" + base, "purge:" + base}; !slices.Equal(order, want) {
		t.Errorf("journal order %v, want %v", order, want)
	}
	evs := f.events(t, queue.ActionPurge)
	if len(evs) != 1 || evs[0].Actor != "local:erin" || evs[0].Reason != "entered twice" ||
		!slices.Equal(evs[0].Keys, []string{keys[0], keys[2]}) || evs[0].Detail["export_file"] != filepath.Base(res.ExportFile) {
		t.Errorf("journal = %+v", evs)
	}

	// A purged key cannot come back: not by redrive (by key or --all) ...
	rr, err := f.svc.Redrive(context.Background(), RedriveRequest{Selection: Selection{Keys: keys[:1]}, ReasonText: "bring it back"})
	if err != nil || len(rr.Redriven) != 0 || !slices.Equal(rr.NotFound, []Missing{{Key: keys[0], State: "purged"}}) {
		t.Errorf("redrive of a purged key = %+v, %v", rr, err)
	}
	rr, err = f.svc.Redrive(context.Background(), RedriveRequest{Selection: Selection{All: true}, ReasonText: "all"})
	if err != nil || len(rr.Redriven) != 1 || rr.Redriven[0].Key != keys[1] {
		t.Errorf("redrive --all after purge = %+v, %v", rr, err)
	}
	// ... nor by submitting it again.
	p, es := movement.Prepare([]byte(movementJSON(spec{id: "A", rxRef: "RX-A"})), testStore, f.clk.Now())
	if es != nil {
		t.Fatal(es)
	}
	var pe *queue.PurgedError
	if _, err := f.q.Enqueue([]movement.Prepared{p}); !errors.As(err, &pe) {
		t.Errorf("re-submitting a purged movement: %v, want a PurgedError", err)
	}
	// Purging it again finds nothing and writes no file.
	res2, err := f.svc.Purge(context.Background(), PurgeRequest{Keys: keys[:1], ReasonText: "again", Confirm: true})
	if err != nil || res2.ExportFile != "" || len(res2.Purged) != 0 {
		t.Errorf("second purge = %+v, %v", res2, err)
	}
	f.verify(t)
}

func TestPurgeDoesNothingWhenTheExportFails(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A"})
	_, err := f.svc.Purge(context.Background(), PurgeRequest{
		Keys: keys, ReasonText: "x", Confirm: true, Dir: filepath.Join(f.dir, "no", "such", "dir"),
	})
	if err == nil || !strings.Contains(err.Error(), "nothing was purged") {
		t.Fatalf("Purge into a missing directory: %v", err)
	}
	if s := f.state(t, keys[0]); s != queue.Quarantined {
		t.Errorf("the movement is %s after a failed export", s)
	}
	if n := len(f.events(t, queue.ActionPurge)); n != 0 {
		t.Errorf("%d purge events journalled", n)
	}
}

func TestPurgeFilesOfTheSameSecondDoNotCollide(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A"}, spec{id: "B"})
	f.svc.clock = func() time.Time { return time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC) }
	var files []string
	for _, k := range keys {
		res, err := f.svc.Purge(context.Background(), PurgeRequest{Keys: []string{k}, ReasonText: "x", Confirm: true})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.Base(res.ExportFile))
	}
	want := []string{"purged-20260301T130000Z.jsonl", "purged-20260301T130000Z-2.jsonl"}
	if !slices.Equal(files, want) {
		t.Errorf("files %v, want %v", files, want)
	}
}

func TestPurgeOnAReadOnlyFileWritesNothing(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A"})
	ro := f.reopenReadOnly(t)
	_, err := New(ro).Purge(context.Background(), PurgeRequest{Keys: keys, ReasonText: "x", Confirm: true})
	if !errors.Is(err, queue.ErrReadOnly) {
		t.Fatalf("Purge on a read-only file: %v, want ErrReadOnly", err)
	}
	if files, _ := filepath.Glob(filepath.Join(f.dir, "purged-*")); len(files) != 0 {
		t.Errorf("left %v", files)
	}
}

// TestLargeExportIsOneJournalEntry: an export of more movements than a
// journal entry's part holds (1,000) is still one entry naming every key.
func TestLargeExportIsOneJournalEntry(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, many("big", 1200)...)
	ex, err := f.svc.StartExport(ExportRequest{Actor: "local:dave", Dest: "all.jsonl"})
	if err != nil || ex.Len() != 1200 {
		t.Fatalf("StartExport = %v, %v", ex, err)
	}
	evs := f.events(t, queue.ActionExport)
	if len(evs) != 1 || evs[0].Count != 1200 || len(evs[0].Keys) != 1200 || evs[0].Part != "" {
		t.Fatalf("%d export entries (first: count %d, %d keys, part %q), want one naming 1200 keys", len(evs), evs[0].Count, len(evs[0].Keys), evs[0].Part)
	}
	got := slices.Clone(evs[0].Keys)
	want := slices.Clone(keys)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Error("the export entry does not name every exported key")
	}
}
