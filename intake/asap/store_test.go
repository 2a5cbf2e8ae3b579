package asap

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestReportListsABoundedNumberOfRecords: a file of refused records gets
// a report of at most MaxReportedRecords of them, and the count of the
// rest; every refused record is counted.
func TestReportListsABoundedNumberOfRecords(t *testing.T) {
	w, _ := newWatcher(t)
	n := MaxReportedRecords + 7
	b := fillN("DSP*00~", 1, n)
	if err := os.WriteFile(filepath.Join(w.Dir, "r.asap"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	reps, err := w.Scan(context.Background())
	if err != nil || len(reps) != 1 {
		t.Fatalf("scan: %+v, %v", reps, err)
	}
	if reps[0].Records != n || len(reps[0].Rejected) != MaxReportedRecords || reps[0].RejectedNotListed != 7 {
		t.Fatalf("report: %d records, %d listed, %d not listed; want %d, %d, 7", reps[0].Records, len(reps[0].Rejected), reps[0].RejectedNotListed, n, MaxReportedRecords)
	}
	if got := reps[0].Rejected[MaxReportedRecords-1].Record; got != MaxReportedRecords {
		t.Errorf("the last record listed is %d, want %d", got, MaxReportedRecords)
	}
	if in := snapshot(w); in.Rejected != uint64(n) || in.FilesRejected != 1 {
		t.Errorf("counted %d refused records and %d rejected files, want %d and 1", in.Rejected, in.FilesRejected, n)
	}
}
