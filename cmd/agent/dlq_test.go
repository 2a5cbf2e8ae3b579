package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/testkit/agenttest"
)

const cliStore = "S0042"

// mv is one movement for the quarantine of a test data directory.
type mv = agenttest.Movement

// quarantinedDataDir makes a data directory of cliStore whose file holds
// the movements quarantined (agenttest.Quarantined).
func quarantinedDataDir(t *testing.T, mvs ...mv) (string, []string) {
	t.Helper()
	return agenttest.Quarantined(t, cliStore, mvs...)
}

// runCLI runs the agent command line and returns its output and exit code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	code = exitCode(err, &errb)
	return out.String(), errb.String(), code
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("agent %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

func TestDLQListAndShow(t *testing.T) {
	dir, keys := quarantinedDataDir(t,
		mv{ID: "POS-1", Reason: "permanent:too_large", Schedule: "CII"},
		mv{ID: "POS-2", Reason: "exhausted:timeout"},
	)
	out := mustCLI(t, "dlq", "list", "--data-dir", dir)
	for _, want := range []string{"KEY", "MOVEMENT_ID", keys[0], keys[1], "controlled/CII", "exhausted:timeout", "POS-2", "2 quarantined movement(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, keys[0]) > strings.Index(out, keys[1]) {
		t.Errorf("list is not oldest first:\n%s", out)
	}

	out = mustCLI(t, "dlq", "list", "--data-dir", dir, "--json", "--reason", "exhausted", "--since", "1h")
	var res dlq.ListResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	if len(res.Items) != 1 || res.Items[0].Key != keys[1] {
		t.Errorf("list --reason exhausted = %+v", res)
	}
	out = mustCLI(t, "dlq", "list", "--data-dir", dir, "--limit", "1")
	if !strings.Contains(out, "showing the 1 oldest of 2") {
		t.Errorf("list --limit 1:\n%s", out)
	}
	out = mustCLI(t, "dlq", "list", "--data-dir", dir, "--until", "2000-01-01")
	if !strings.Contains(out, "no quarantined movements") {
		t.Errorf("list --until 2000-01-01:\n%s", out)
	}

	out = mustCLI(t, "dlq", "show", keys[0], "--data-dir", dir)
	for _, want := range []string{keys[0], "POS-1", "permanent:too_large", "maximum payload exceeded", "Attempts", "not shown (add --payload)", "online"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "12345-6789-01") {
		t.Errorf("show without --payload prints the payload:\n%s", out)
	}
	out = mustCLI(t, "dlq", "show", keys[0], "--payload", "--data-dir", dir)
	if !strings.Contains(out, `"ndc": "12345-6789-01"`) {
		t.Errorf("show --payload lacks the payload:\n%s", out)
	}

	for _, ref := range []string{"POS-1", keys[0][:10], strings.ToUpper(keys[0][:6])} {
		if out := mustCLI(t, "dlq", "show", ref, "--data-dir", dir); !strings.Contains(out, keys[0]) {
			t.Errorf("show %s does not show %s:\n%s", ref, keys[0], out)
		}
	}
	out = mustCLI(t, "dlq", "list", "--summary", "--data-dir", dir)
	for _, want := range []string{"REASON", "CONTROLLED", "exhausted:timeout  1  0  1", "permanent:too_large  1  1  0", "all  2  1  1"} {
		if !strings.Contains(strings.Join(strings.Fields(out), "  "), want) {
			t.Errorf("list --summary lacks %q:\n%s", want, out)
		}
	}
	out = mustCLI(t, "dlq", "list", "--summary", "--json", "--reason", "exhausted", "--data-dir", dir)
	var sum dlq.Summary
	if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.Total.Total != 1 || len(sum.Reasons) != 1 || sum.Reasons[0].Reason != "exhausted:timeout" {
		t.Errorf("list --summary --json: %v\n%s", err, out)
	}

	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"summary with limit", []string{"dlq", "list", "--summary", "--limit", "1"}, 2, "--limit"},
		{"bad since", []string{"dlq", "list", "--since", "yesterday"}, 2, "--since"},
		{"bad reason", []string{"dlq", "list", "--reason", "too large"}, 2, "--reason"},
		{"no such movement_id", []string{"dlq", "show", "POS-9"}, 1, `no quarantined movement has the movement_id "POS-9"`},
		{"short prefix", []string{"dlq", "show", keys[0][:3]}, 1, "a key prefix needs at least 4 characters"},
		{"unknown key", []string{"dlq", "show", strings.Repeat("0", 32)}, 1, "holds no such movement"},
		{"no key", []string{"dlq", "show"}, 2, "accepts 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs, code := runCLI(t, append(tt.args, "--data-dir", dir)...)
			if code != tt.code || !strings.Contains(errs, tt.msg) {
				t.Fatalf("exit %d, stderr %q; want %d containing %q", code, errs, tt.code, tt.msg)
			}
		})
	}
}

func TestDLQRedriveSpreadsWithinTheWindow(t *testing.T) {
	var mvs []mv
	for i := range 40 {
		mvs = append(mvs, mv{ID: fmt.Sprintf("POS-%d", i)})
	}
	dir, keys := quarantinedDataDir(t, mvs...)

	start := time.Now()
	out := mustCLI(t, "dlq", "redrive", "--all", "--reason-text", "central raised the size limit", "--spread", "10m", "--json", "--data-dir", dir)
	end := time.Now()
	var res dlq.RedriveResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("redrive --json: %v\n%s", err, out)
	}
	if len(res.Redriven) != len(keys) {
		t.Fatalf("redriven %d, want %d", len(res.Redriven), len(keys))
	}
	for _, r := range res.Redriven {
		if r.DueAt == nil || r.DueAt.Before(start) || !r.DueAt.Before(end.Add(10*time.Minute)) {
			t.Errorf("%s due %v, want within [%v, %v)", r.Key, r.DueAt, start, end.Add(10*time.Minute))
		}
	}
	out = mustCLI(t, "dlq", "list", "--data-dir", dir)
	if !strings.Contains(out, "no quarantined movements") {
		t.Errorf("after redrive --all:\n%s", out)
	}
	out = mustCLI(t, "audit", "--data-dir", dir, "--action", "redrive", "--json")
	var audit dlq.AuditResult
	if err := json.Unmarshal([]byte(out), &audit); err != nil {
		t.Fatal(err)
	}
	if len(audit.Events) != 1 || audit.Events[0].Actor != control.LocalActor() || audit.Events[0].Reason != "central raised the size limit" ||
		audit.Events[0].Count != len(keys) || audit.Events[0].Detail["spread"] != "10m0s" {
		t.Errorf("audit = %+v", audit.Events)
	}
}

func TestDLQRedriveSelectionsAndRefusals(t *testing.T) {
	dir, keys := quarantinedDataDir(t,
		mv{ID: "A", Reason: "permanent:too_large"},
		mv{ID: "B", Reason: "exhausted:timeout"},
		mv{ID: "C", Reason: "exhausted:timeout"},
	)
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no reason text", []string{"--all"}, 2, "--reason-text"},
		{"no selection", []string{"--reason-text", "x"}, 2, "selection"},
		{"two selections", []string{keys[0], "--all", "--reason-text", "x"}, 2, "not several"},
		{"bad key", []string{"nope", "--reason-text", "x"}, 2, `"nope" is not a movement key`},
		{"bad spread", []string{"--all", "--reason-text", "x", "--spread", "soon"}, 2, "--spread"},
		{"spread too long", []string{"--all", "--reason-text", "x", "--spread", "48h"}, 2, "--spread"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs, code := runCLI(t, append([]string{"dlq", "redrive", "--data-dir", dir}, tt.args...)...)
			if code != tt.code || !strings.Contains(errs, tt.msg) {
				t.Fatalf("exit %d, stderr %q; want %d containing %q", code, errs, tt.code, tt.msg)
			}
		})
	}

	// A dry run needs no reason, lists, and changes nothing.
	out := mustCLI(t, "dlq", "redrive", "--reason", "exhausted", "--oldest", "1", "--dry-run", "--data-dir", dir)
	if !strings.Contains(out, "would redrive 1 movement(s)") || !strings.Contains(out, keys[1]) || strings.Contains(out, keys[2]) {
		t.Errorf("dry run:\n%s", out)
	}
	var res dlq.ListResult
	json.Unmarshal([]byte(mustCLI(t, "dlq", "list", "--json", "--data-dir", dir)), &res)
	if res.Matched != 3 {
		t.Errorf("%d quarantined after a dry run, want 3", res.Matched)
	}

	// Keys: the quarantined one is redriven, the unknown one reported, exit 1.
	unknown := strings.Repeat("f", 32)
	out, errs, code := runCLI(t, "dlq", "redrive", keys[0], unknown, "--reason-text", "fixed", "--data-dir", dir)
	if code != 1 || !strings.Contains(out, "redriven 1 movement(s), due now") || !strings.Contains(out, "not found: "+unknown) ||
		!strings.Contains(errs, "1 key(s) were not quarantined (see above); the other 1 redriven") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	out = mustCLI(t, "dlq", "redrive", "--reason", "timeout", "--reason-text", "fixed", "--data-dir", dir)
	if !strings.Contains(out, "redriven 2 movement(s)") {
		t.Errorf("redrive --reason timeout:\n%s", out)
	}
}

func TestDLQPurgeRefusesThenExportsFirstAndTheKeyNeverComesBack(t *testing.T) {
	dir, keys := quarantinedDataDir(t, mv{ID: "A", RxRef: "RX-77"}, mv{ID: "B"})
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"no keys", []string{"--reason-text", "x", "--yes"}, "give the keys of the movements to purge, or --all"},
		{"no reason text", []string{keys[0], "--yes"}, "--reason-text"},
		{"no --yes", []string{keys[0], "--reason-text", "entered twice"}, "--yes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs, code := runCLI(t, append([]string{"dlq", "purge", "--data-dir", dir}, tt.args...)...)
			if code != 2 || !strings.Contains(errs, tt.msg) {
				t.Fatalf("exit %d, stderr %q; want 2 containing %q", code, errs, tt.msg)
			}
		})
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "purged-*")); len(files) != 0 {
		t.Fatalf("refused purges wrote %v", files)
	}
	if out := mustCLI(t, "dlq", "list", "--data-dir", dir); !strings.Contains(out, keys[0]) {
		t.Fatalf("refused purge removed the movement:\n%s", out)
	}

	out := mustCLI(t, "dlq", "purge", keys[0], "--reason-text", "entered twice", "--yes", "--data-dir", dir)
	files, _ := filepath.Glob(filepath.Join(dir, "purged-*.jsonl"))
	if len(files) != 1 || !strings.Contains(out, "exported 1 movement(s) to "+files[0]) || !strings.Contains(out, "purged 1 movement(s)") {
		t.Fatalf("purge:\n%s\nfiles %v", out, files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var d dlq.Detail
	if err := json.Unmarshal(bytes.TrimSpace(data), &d); err != nil || d.Key != keys[0] || !strings.Contains(string(d.Payload), "RX-77") {
		t.Errorf("export file holds %s (%v)", data, err)
	}
	if fi, _ := os.Stat(files[0]); runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("export file mode %v", fi.Mode().Perm())
	}

	// The key cannot come back by redrive.
	out, errs, code := runCLI(t, "dlq", "redrive", keys[0], "--reason-text", "undo", "--data-dir", dir)
	if code != 1 || !strings.Contains(out, "redriven 0 movement(s)") || !strings.Contains(out, "purged: it can never be redriven") {
		t.Errorf("redrive of a purged key: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	out = mustCLI(t, "dlq", "redrive", "--all", "--reason-text", "all", "--json", "--data-dir", dir)
	var rr dlq.RedriveResult
	json.Unmarshal([]byte(out), &rr)
	if len(rr.Redriven) != 1 || rr.Redriven[0].Key != keys[1] {
		t.Errorf("redrive --all after the purge = %+v", rr)
	}

	// The journal holds the export before the purge, by this user, with why.
	out = mustCLI(t, "audit", "--data-dir", dir, "--action", "export,purge", "--json")
	var audit dlq.AuditResult
	json.Unmarshal([]byte(out), &audit)
	if len(audit.Events) != 2 || audit.Events[0].Action != "export" || audit.Events[1].Action != "purge" ||
		audit.Events[1].Actor != control.LocalActor() || audit.Events[1].Reason != "entered twice" || audit.Events[1].Keys[0] != keys[0] {
		t.Errorf("audit = %+v", audit.Events)
	}
}

func TestDLQExport(t *testing.T) {
	dir, keys := quarantinedDataDir(t, mv{ID: "A", Note: "n1"}, mv{ID: "B", Reason: "exhausted:timeout"})
	file := filepath.Join(t.TempDir(), "dlq.jsonl")
	out := mustCLI(t, "dlq", "export", "-o", file, "--reason-text", "inspection", "--data-dir", dir)
	if !strings.Contains(out, "exported 2 movement(s) to "+file) {
		t.Errorf("export -o:\n%s", out)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var d dlq.Detail
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		if d.Payload == nil || d.Reason == "" || d.StoreID != cliStore {
			t.Errorf("line %+v", d)
		}
		got = append(got, d.Key)
	}
	if strings.Join(got, ",") != strings.Join(keys, ",") {
		t.Errorf("exported %v, want %v", got, keys)
	}
	if fi, _ := os.Stat(file); runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("export file mode %v", fi.Mode().Perm())
	}
	if _, errs, code := runCLI(t, "dlq", "export", "-o", file, "--data-dir", dir); code != 2 || !strings.Contains(errs, "exists") {
		t.Errorf("export over an existing file: exit %d, %s", code, errs)
	}

	stdout, stderr, code := runCLI(t, "dlq", "export", "--reason", "exhausted", "--data-dir", dir)
	if code != 0 || strings.Count(stdout, "\n") != 1 || !strings.Contains(stdout, keys[1]) || !strings.Contains(stderr, "exported 1 movement(s)") {
		t.Errorf("export to stdout: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}

	out = mustCLI(t, "audit", "--data-dir", dir, "--action", "export", "--json")
	var audit dlq.AuditResult
	json.Unmarshal([]byte(out), &audit)
	if len(audit.Events) != 2 || audit.Events[0].Detail["dest"] != file || audit.Events[0].Reason != "inspection" ||
		audit.Events[0].Count != 2 || audit.Events[1].Detail["dest"] != "stdout" || audit.Events[1].Actor != control.LocalActor() {
		t.Errorf("audit = %+v", audit.Events)
	}
}

func TestAuditCLI(t *testing.T) {
	dir, keys := quarantinedDataDir(t, mv{ID: "A"}, mv{ID: "B"}, mv{ID: "C"}, mv{ID: "D"})
	mustCLI(t, "dlq", "redrive", "--all", "--reason-text", "central\tfixed", "--data-dir", dir)

	out := mustCLI(t, "audit", "--data-dir", dir)
	for _, want := range []string{"TIME", "ACTION", "quarantine", "redrive", "agent", control.LocalActor(), keys[0][:8] + "…", "+1 more", "central fixed", "selection=all"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, keys[0]) {
		t.Errorf("the audit table prints whole keys:\n%s", out)
	}
	out = mustCLI(t, "audit", "--data-dir", dir, "--json", "--action", "redrive")
	if !strings.Contains(out, keys[3]) {
		t.Errorf("audit --json lacks the full keys:\n%s", out)
	}
	if out := mustCLI(t, "audit", "--data-dir", dir, "--since", "2000-01-01", "--until", "2000-01-02"); !strings.Contains(out, "no audit events") {
		t.Errorf("audit of an empty window:\n%s", out)
	}
	if _, errs, code := runCLI(t, "audit", "--data-dir", dir, "--since", "last week"); code != 2 || !strings.Contains(errs, "--since") {
		t.Errorf("audit --since 'last week': exit %d, %s", code, errs)
	}

	var res dlq.AuditResult
	out = mustCLI(t, "audit", "--data-dir", dir, "--json", "--key", keys[2][:12])
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Events) != 2 || res.Events[0].Action != "quarantine" || res.Events[1].Action != "redrive" {
		t.Errorf("audit --key: %v\n%s", err, out)
	}
	out = mustCLI(t, "audit", "--data-dir", dir, "--json", "--actor", strings.ToUpper(control.LocalActor()))
	res = dlq.AuditResult{}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Events) != 1 || res.Events[0].Action != "redrive" {
		t.Errorf("audit --actor: %v\n%s", err, out)
	}
	if _, errs, code := runCLI(t, "audit", "--data-dir", dir, "--key", "POS-1"); code != 2 || !strings.Contains(errs, "--key") {
		t.Errorf("audit --key POS-1: exit %d, %s", code, errs)
	}
}

// TestDLQPurgeBySelection: purge takes the selectors of redrive.
func TestDLQPurgeBySelection(t *testing.T) {
	dir, keys := quarantinedDataDir(t,
		mv{ID: "A", Reason: "permanent:too_large"},
		mv{ID: "B", Reason: "exhausted:timeout"},
		mv{ID: "C", Reason: "exhausted:timeout"},
	)
	if _, errs, code := runCLI(t, "dlq", "purge", "--reason", "exhausted", "--reason-text", "x", "--data-dir", dir); code != 2 || !strings.Contains(errs, "--yes") {
		t.Fatalf("purge --reason without --yes: exit %d %s", code, errs)
	}
	if _, errs, code := runCLI(t, "dlq", "purge", keys[0], "--all", "--reason-text", "x", "--yes", "--data-dir", dir); code != 2 || !strings.Contains(errs, "ambiguous") {
		t.Fatalf("purge KEY --all: exit %d %s", code, errs)
	}
	var res dlq.PurgeResult
	out := mustCLI(t, "dlq", "purge", "--reason", "exhausted", "--oldest", "1", "--reason-text", "entered twice", "--yes", "--json", "--data-dir", dir)
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Purged) != 1 || res.Purged[0] != keys[1] {
		t.Fatalf("purge --reason exhausted --oldest 1: %v\n%s", err, out)
	}
	out = mustCLI(t, "dlq", "purge", "--all", "--reason-text", "entered twice", "--yes", "--data-dir", dir)
	if !strings.Contains(out, "purged 2 movement(s)") {
		t.Fatalf("purge --all:\n%s", out)
	}
	if out := mustCLI(t, "dlq", "list", "--data-dir", dir); !strings.Contains(out, "no quarantined movements") {
		t.Errorf("after purge --all:\n%s", out)
	}
}

// TestCLIKeepsPatientDataInThePayload checks DESIGN P6 at the command
// line: a marker in rx_ref and note is printed by show --payload and
// exports only.
func TestCLIKeepsPatientDataInThePayload(t *testing.T) {
	const marker = "PATIENT-MARKER-5150"
	dir, keys := quarantinedDataDir(t,
		mv{ID: "A", RxRef: "RX-" + marker, Note: "for " + marker, Schedule: "CII"},
		mv{ID: "B", Note: marker},
		mv{ID: "C", RxRef: marker},
	)
	var outputs []string
	runs := [][]string{
		{"dlq", "list"},
		{"dlq", "list", "--json"},
		{"dlq", "show", keys[0]},
		{"dlq", "show", keys[0], "--json"},
		{"dlq", "redrive", keys[1], "--reason-text", "retry"},
		{"dlq", "redrive", "--all", "--dry-run", "--json"},
		{"dlq", "purge", keys[0], "--reason-text", "twice", "--yes"},
		{"dlq", "purge", keys[2], "--reason-text", "twice"}, // refused
		{"dlq", "show", keys[1]},                            // not quarantined any more
		{"audit"},
		{"audit", "--json"},
	}
	for _, args := range runs {
		stdout, stderr, _ := runCLI(t, append(args, "--data-dir", dir)...)
		outputs = append(outputs, strings.Join(args, " ")+": "+stdout+stderr)
	}
	for _, o := range outputs {
		if strings.Contains(o, marker) {
			t.Errorf("patient data printed by %s", o)
		}
	}
	if out := mustCLI(t, "dlq", "show", keys[2], "--payload", "--data-dir", dir); !strings.Contains(out, marker) {
		t.Errorf("show --payload lacks the payload:\n%s", out)
	}
	if out := mustCLI(t, "dlq", "export", "--data-dir", dir); !strings.Contains(out, marker) {
		t.Errorf("export lacks the payload:\n%s", out)
	}
}

func TestDLQOnAFileLockedByAnotherProcess(t *testing.T) {
	dir, _ := quarantinedDataDir(t, mv{ID: "A"})
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: cliStore})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	_, errs, code := runCLI(t, "dlq", "list", "--data-dir", dir)
	if code != 1 || !strings.Contains(errs, "locked by another process") {
		t.Errorf("exit %d, stderr %q; want 1 and a locked-file message", code, errs)
	}
}

func TestDLQWithoutADataFile(t *testing.T) {
	_, errs, code := runCLI(t, "dlq", "list", "--data-dir", t.TempDir())
	if code != 1 || !strings.Contains(errs, "no agent data file") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// TestDLQThroughTheRunningAgent runs the agent and operates on its
// quarantine through the control socket.
func TestDLQThroughTheRunningAgent(t *testing.T) {
	dir, keys := quarantinedDataDir(t, mv{ID: "A"}, mv{ID: "B", Reason: "exhausted:timeout"})
	runDaemon(t, localOptions(t, dir), nil)

	// The agent holds the file: only the socket can answer.
	conn, err := connect(context.Background(), dir, readOnly, "")
	if err != nil {
		t.Fatal(err)
	}
	if !conn.running {
		t.Fatal("connect did not reach the running agent")
	}
	conn.Close()

	out := mustCLI(t, "dlq", "list", "--data-dir", dir)
	if !strings.Contains(out, keys[0]) || !strings.Contains(out, keys[1]) {
		t.Errorf("list through the socket:\n%s", out)
	}
	out = mustCLI(t, "dlq", "redrive", "--reason", "exhausted", "--reason-text", "through the socket", "--data-dir", dir)
	if !strings.Contains(out, "redriven 1 movement(s)") {
		t.Errorf("redrive through the socket:\n%s", out)
	}
	out = mustCLI(t, "dlq", "export", "--data-dir", dir)
	if !strings.Contains(out, keys[0]) || strings.Contains(out, keys[1]) {
		t.Errorf("export through the socket:\n%s", out)
	}
	out = mustCLI(t, "audit", "--data-dir", dir, "--json")
	var audit dlq.AuditResult
	if err := json.Unmarshal([]byte(out), &audit); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range audit.Events {
		actions = append(actions, e.Action+":"+e.Actor)
	}
	want := []string{"quarantine:agent", "quarantine:agent", "start:agent", "redrive:" + control.LocalActor(), "export:" + control.LocalActor()}
	if strings.Join(actions, " ") != strings.Join(want, " ") {
		t.Errorf("journal %v, want %v", actions, want)
	}
}
