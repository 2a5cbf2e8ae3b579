package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// goValuePattern matches a Go value as fmt prints it with %v: a map, a
// pointer to a struct, a slice or array ("[]", "[10]", "[10 20]").
var goValuePattern = regexp.MustCompile(`map\[|&\{|\[[^\]\s,]*( [^\]\s,]+)*\]`)

// goValue reports whether out shows a Go value.
func goValue(out string) bool { return goValuePattern.MatchString(out) }

// TestWitnessPrintsNoGoValues runs one witness pass in which a store's
// checkpoints are countersigned and another's, whose key the roster does
// not hold, are refused: the summary counts the refusals by reason in
// words, and a pass with none says 0, never a Go map ("refused map[]");
// the refusal's log line names its sizes in words too.
func TestWitnessPrintsNoGoValues(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := natstest.StartHub(t)
	js := natstest.JetStream(t, natstest.Connect(t, srv.URL()))
	a, b := ledgertest.NewStore(t, "S0042"), ledgertest.NewStore(t, "S0043")
	a.Movements(ctx, t, js, 3)
	a.Checkpoint(ctx, t, js)
	b.Movements(ctx, t, js, 2)
	b.Checkpoint(ctx, t, js)
	ledgertest.WaitArchived(ctx, t, js, central.ArchiveStreamName, 3+1+2+1)
	dir := t.TempDir()
	roster := filepath.Join(dir, "roster.txt")
	other := ledgertest.NewStore(t, "S0043") // S0043 with a key its checkpoints are not signed with
	if err := os.WriteFile(roster, []byte(a.RosterLine()+other.RosterLine()), 0o600); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "witness.key")
	mustCLI(t, "witness-key", "--out", key)
	args := []string{"witness", "--once", "--signing-key", key, "--state", filepath.Join(dir, "witness.state"), "--roster", roster, "--server", srv.URL()}

	stdout, stderr, code := runCLI(t, args...)
	if want := "2 checkpoints read: 1 countersigned, 0 skipped, 1 refused (bad_signature 1)\n"; code != 0 || stdout != want || goValue(stdout+stderr) {
		t.Errorf("first pass: exit %d\nstdout %q\nstderr %q\nwant stdout %q and no Go value", code, stdout, stderr, want)
	}
	stdout, stderr, code = runCLI(t, args...)
	if want := "0 checkpoints read: 0 countersigned, 0 skipped, 0 refused\n"; code != 0 || stdout != want || goValue(stdout+stderr) {
		t.Errorf("a pass with nothing new: exit %d\nstdout %q\nstderr %q\nwant stdout %q and no Go value", code, stdout, stderr, want)
	}
}

// TestVerifyTablePrintsNoGoValues: a finding's checkpoint sizes are a list
// in words, not a Go slice.
func TestVerifyTablePrintsNoGoValues(t *testing.T) {
	var b bytes.Buffer
	rep := &audit.Report{Findings: []audit.Finding{{Kind: audit.KindForked, Store: "S0042", Log: "L1", From: 3, To: 4, Sizes: []int64{10, 20}, Detail: "two roots"}}}
	if err := writeVerify(&b, rep); err != nil {
		t.Fatal(err)
	}
	if want := "forked: store S0042 log L1 sequences 3-4 sizes 10, 20: two roots\n"; !strings.Contains(b.String(), want) || strings.Contains(b.String(), "[10") {
		t.Errorf("verify's table:\n%s\nwant the line %q", b.String(), want)
	}
}
