package asap

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/dlqtest"
)

const marker = "ZQXPATIENTMARKER"

func newWatcher(t *testing.T) (*Watcher, *queue.Queue) {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: "S0042"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	fm, err := intake.LoadFormulary("testdata/formulary.csv")
	if err != nil {
		t.Fatal(err)
	}
	cs := new(intake.Counters)
	w := &Watcher{Dir: t.TempDir(), Sink: &intake.Sink{Queue: q, StoreID: "S0042"}, Formulary: fm, Counter: &cs.ASAP}
	countersOf[w] = cs
	t.Cleanup(func() { delete(countersOf, w) })
	if err := w.Prepare(); err != nil {
		t.Fatal(err)
	}
	return w, q
}

// countersOf holds the counters of each watcher newWatcher made.
var countersOf = map[*Watcher]*intake.Counters{}

// snapshot is what status would show of w's folder.
func snapshot(w *Watcher) status.Intake {
	for _, in := range countersOf[w].Snapshot() {
		if in.Name == intake.NameASAP {
			return in
		}
	}
	return status.Intake{}
}

func drop(t *testing.T, w *Watcher, sample, as string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", sample))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.Dir, as), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func pending(t *testing.T, q *queue.Queue) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range dlqtest.Pending(t, q) {
		var m struct {
			ID string `json:"movement_id"`
		}
		json.Unmarshal(r.Payload, &m)
		out[m.ID] = string(r.Payload)
	}
	return out
}

func TestSamples(t *testing.T) {
	w, q := newWatcher(t)
	drop(t, w, "sample-4.2A.asap", "a.asap")
	drop(t, w, "sample-4.2B.asap", "b.asap")
	reps, err := w.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 {
		t.Fatalf("%d files taken, want 2", len(reps))
	}
	a, b := reps[0], reps[1]
	if a.Version != "4.2A" || a.Records != 5 || a.Stored != 2 || a.Duplicates != 1 || len(a.Rejected) != 2 {
		t.Errorf("4.2A report %+v", a)
	}
	wantA := "4:DSP08,DSP11 5:DSP05"
	if got := rejected(a); got != wantA {
		t.Errorf("4.2A rejected %s, want %s", got, wantA)
	}
	if b.Version != "4.2B" || b.Records != 4 || b.Stored != 2 || b.Duplicates != 1 || len(b.Rejected) != 1 {
		t.Errorf("4.2B report %+v", b)
	}
	if got := rejected(b); got != "3:DSP07" {
		t.Errorf("4.2B rejected %s, want 3:DSP07", got)
	}
	got := pending(t, q)
	want := map[string]string{
		"asap:RXA100:0:20260301": `"ndc":"00406-0552-62","ndc_as_sent":"00406055262","quantity":"30","unit":"EA"`,
		"asap:RXA101:1:20260301": `"quantity":"15.5","unit":"EA"`,
		"asap:RXB200:0:20260302": `"ndc":"00054-0237-25","ndc_as_sent":"00054023725","quantity":"120","unit":"ML"`,
		"asap:RXB202:2:20260302": `"unit":"GM","occurred_at":"2026-03-02T00:00:00`,
	}
	if len(got) != len(want) {
		t.Errorf("stored %d movements, want %d: %v", len(got), len(want), got)
	}
	for id, frag := range want {
		if !strings.Contains(got[id], frag) || !strings.Contains(got[id], `"type":"dispense"`) || !strings.Contains(got[id], `"schedule":"C`) {
			t.Errorf("%s: %s, want it to hold %s", id, got[id], frag)
		}
	}
	// Both files had rejected records: each is in rejected/ with its report,
	// and nothing is left in the drop folder.
	for _, n := range []string{"a.asap", "b.asap"} {
		if _, err := os.Stat(filepath.Join(w.Dir, RejectedDir, n)); err != nil {
			t.Errorf("%s not in rejected/: %v", n, err)
		}
		rb, err := os.ReadFile(filepath.Join(w.Dir, RejectedDir, n+".report.json"))
		if err != nil {
			t.Errorf("%s: no report: %v", n, err)
		}
		if bytes.Contains(rb, []byte(marker)) || bytes.Contains(rb, []byte("99999999999")) || bytes.Contains(rb, []byte("20261399")) {
			t.Errorf("%s report holds a value:\n%s", n, rb)
		}
		if _, err := os.Stat(filepath.Join(w.Dir, n)); err == nil {
			t.Errorf("%s left in the drop folder", n)
		}
	}
	for id, p := range got {
		if strings.Contains(p, marker) {
			t.Errorf("%s holds patient data: %s", id, p)
		}
	}
}

func rejected(r Report) string {
	var parts []string
	for _, rr := range r.Rejected {
		var fs []string
		for _, e := range rr.Errors {
			fs = append(fs, e.Field)
		}
		parts = append(parts, strings.Join([]string{itoa(rr.Record), strings.Join(fs, ",")}, ":"))
	}
	return strings.Join(parts, " ")
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A file still being written (no TT yet) is left alone; once complete it
// is taken, and a clean file goes to done/.
func TestCompletionRuleAndDone(t *testing.T) {
	w, q := newWatcher(t)
	full := "TH*4.2A*C1*01**20260302*101500*P**~~\nIS*1*X*~\nPHA*1234567893~\nPAT*NY*06*" + marker + "~\nDSP*00*RXC1*20260301*0*20260301*00*01*00406055262*10**01~\nPRE*1*AB1234563***" + marker + "~\nTP*5~\nTT*C1*8~\n"
	cut := strings.Index(full, "TP*")
	path := filepath.Join(w.Dir, "c.asap")
	os.WriteFile(path, []byte(full[:cut]), 0o600)
	reps, err := w.Scan(context.Background())
	if err != nil || len(reps) != 0 {
		t.Fatalf("an incomplete file was taken: %+v %v", reps, err)
	}
	os.WriteFile(path, []byte(full), 0o600)
	reps, err = w.Scan(context.Background())
	if err != nil || len(reps) != 1 || reps[0].Stored != 1 || len(reps[0].Rejected) != 0 || len(reps[0].Errors) != 0 {
		t.Fatalf("complete file: %+v %v", reps, err)
	}
	if _, err := os.Stat(filepath.Join(w.Dir, DoneDir, "c.asap")); err != nil {
		t.Fatalf("not in done/: %v", err)
	}
	// The same file again (a crash before the move would do this): taken,
	// nothing stored twice, and both copies kept in done/.
	os.WriteFile(path, []byte(full), 0o600)
	reps, _ = w.Scan(context.Background())
	if len(reps) != 1 || reps[0].Duplicates != 1 || reps[0].Stored != 0 {
		t.Fatalf("again: %+v", reps)
	}
	if _, err := os.Stat(filepath.Join(w.Dir, DoneDir, "c.asap.1")); err != nil {
		t.Fatalf("second copy not in done/: %v", err)
	}
	if n := len(pending(t, q)); n != 1 {
		t.Fatalf("%d stored, want 1", n)
	}
}

func TestMalformedFilesRejectedWhole(t *testing.T) {
	w, q := newWatcher(t)
	for name, body := range map[string]string{
		"count.asap":   "TH*4.2A*C1*01**20260302*101500*P**~~DSP*00*RX1*20260301*0*20260301*00*01*00406055262*10**01~TT*C1*9~",
		"version.asap": "TH*4.1*C1*01**20260302*101500*P**~~TT*C1*2~",
		"control.asap": "TH*4.2B*C1*01**20260302*101500*P**~~TT*C2*2~",
	} {
		os.WriteFile(filepath.Join(w.Dir, name), []byte(body), 0o600)
	}
	reps, err := w.Scan(context.Background())
	if err != nil || len(reps) != 3 {
		t.Fatalf("%+v %v", reps, err)
	}
	want := map[string]string{"count.asap": "TT02", "version.asap": "TH01", "control.asap": "TT01"}
	for _, r := range reps {
		if len(r.Errors) != 1 || r.Errors[0].Field != want[r.File] {
			t.Errorf("%s: %+v, want %s", r.File, r.Errors, want[r.File])
		}
	}
	if n := len(pending(t, q)); n != 0 {
		t.Fatalf("%d stored from malformed files", n)
	}
}

// FuzzParse decodes anything: no panic, every record a movement or its
// errors, and the work bounded by the input before anything grows with it
// (Complete allocates nothing, Parse at most parseAllocBound whatever the
// input, each record at most recordAllocBound beyond four times the
// file).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"sample-4.2A.asap", "sample-4.2B.asap"} {
		b, _ := os.ReadFile(filepath.Join("testdata", s))
		f.Add(b)
	}
	f.Add([]byte("TH*4.2A*C1*01**20260302*101500*P**~~TT*C1*2~"))
	f.Add([]byte("TH*4.2A*C1*01**20260302*101500*P**~~~~~~~~~~~~~~~~TT*C1*2~"))
	f.Add([]byte("TH*4.2A*C1*01**20260302*101500*P**~~DSP~DSP*~DSP**~TT*C1*5~"))
	fm := intake.Formulary{"00406-0552-62": {Schedule: "CII"}}
	f.Fuzz(func(t *testing.T, b []byte) {
		if n := allocated(func() { Complete(b) }); n != 0 {
			t.Fatalf("Complete allocated %d bytes", n)
		}
		var file *File
		var err error
		if n := allocated(func() { file, err = Parse(b) }); n > parseAllocBound {
			t.Fatalf("Parse of %d bytes allocated %d, want at most %d", len(b), n, parseAllocBound)
		}
		if err != nil {
			return
		}
		var recs []Record
		n := allocated(func() { recs = Records(file, fm, nil) })
		if bound := uint64(4*len(b) + recordAllocBound*(file.DSPCount+1)); n > bound {
			t.Fatalf("%d records of %d bytes allocated %d, want at most %d", file.DSPCount, len(b), n, bound)
		}
		if len(recs) != file.DSPCount {
			t.Fatalf("%d records, %d DSP segments", len(recs), file.DSPCount)
		}
		for _, r := range recs {
			if r.Movement == nil && len(r.Errors) == 0 {
				t.Fatal("a record with neither movement nor errors")
			}
		}
	})
}

// stopAfter is a context whose Err is nil for its first n calls, then
// Canceled: a stop that arrives while a file is being stored.
type stopAfter struct {
	context.Context
	n int
}

func (c *stopAfter) Err() error {
	if c.n > 0 {
		c.n--
		return nil
	}
	return context.Canceled
}

// A stop between two submissions of a large file leaves the file in the
// folder; the next scan takes it, its first part as duplicates.
func TestStopMidFileLeavesItForLater(t *testing.T) {
	w, q := newWatcher(t)
	n := ChunkRecords + 1
	var b strings.Builder
	b.WriteString("TH*4.2B*S1*01**20260302*101500*P**~~\nIS*1*X*~\nPHA*1234567893~\n")
	for i := range n {
		b.WriteString("DSP*00*RXS" + itoa(i) + "*20260301*0*20260301*00*01*00406055262*1**01~\n")
	}
	b.WriteString("TP*" + itoa(n+2) + "~\nTT*S1*" + itoa(n+5) + "~\n")
	os.WriteFile(filepath.Join(w.Dir, "big.asap"), []byte(b.String()), 0o600)
	// One Err for the folder, one before the first submission.
	reps, err := w.Scan(&stopAfter{Context: context.Background(), n: 2})
	if err != nil || len(reps) != 0 {
		t.Fatalf("stopped scan: %+v %v", reps, err)
	}
	if _, err := os.Stat(filepath.Join(w.Dir, "big.asap")); err != nil {
		t.Fatalf("the file left the folder after a stop mid-way: %v", err)
	}
	if got := len(pending(t, q)); got != ChunkRecords {
		t.Fatalf("%d stored before the stop, want %d", got, ChunkRecords)
	}
	reps, err = w.Scan(context.Background())
	if err != nil || len(reps) != 1 || reps[0].Duplicates != ChunkRecords || reps[0].Stored != 1 {
		t.Fatalf("second scan: %+v %v", reps, err)
	}
}

// TestFormularyRefusals reports, by element, a bare 10-digit NDC the
// formulary does not resolve (DSP08) and a unit other than the
// formulary's (DSP11); a bare 10-digit NDC it resolves is stored in its
// canonical form.
func TestFormularyRefusals(t *testing.T) {
	w, q := newWatcher(t)
	w.Formulary = intake.Formulary{"00406-0552-62": {Schedule: "CII", Unit: "EA"}}
	body := "TH*4.2A*F1*01**20260302*101500*P**~~\n" +
		"DSP*00*RXF1*20260301*0*20260301*00*01*1234567890*10**01~\n" + // 01234-5678-90, 12345-0678-90 or 12345-6789-00?
		"DSP*00*RXF2*20260301*0*20260301*00*01*00406055262*10**02~\n" + // mL for a product counted in each
		"DSP*00*RXF3*20260301*0*20260301*00*01*0406055262*10**01~\n" + // 00406-0552-62: the only reading listed
		"TT*F1*5~\n"
	os.WriteFile(filepath.Join(w.Dir, "f.asap"), []byte(body), 0o600)
	reps, err := w.Scan(context.Background())
	if err != nil || len(reps) != 1 {
		t.Fatalf("%d reports, %v", len(reps), err)
	}
	if got := rejected(reps[0]); got != "1:DSP08 2:DSP11" || reps[0].Stored != 1 {
		t.Fatalf("rejected %s, stored %d; want 1:DSP08 2:DSP11 and one stored", got, reps[0].Stored)
	}
	msgs := reps[0].Rejected[0].Errors[0].Error + " / " + reps[0].Rejected[1].Errors[0].Error
	if !strings.Contains(msgs, "ambiguous") || !strings.Contains(msgs, "must be EA") {
		t.Errorf("the report says %q", msgs)
	}
	if got := pending(t, q)["asap:RXF3:0:20260301"]; !strings.Contains(got, `"ndc":"00406-0552-62","ndc_as_sent":"0406055262"`) {
		t.Errorf("stored %s", got)
	}
}
