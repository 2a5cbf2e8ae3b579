package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func enqueueLine(id string, qty int) string {
	return fmt.Sprintf(`{"movement_id":%q,"type":"receive","ndc":"1234-5678-90","quantity":%d,"unit":"ML","occurred_at":"2026-03-01T09:30:00Z"}`, id, qty)
}

// checkEnqueue runs `agent enqueue` twice over the same data directory:
// new, duplicate, conflicting and invalid lines are each reported with
// their line numbers, and the exit status is 1 when any line was rejected.
func checkEnqueue(t *testing.T, dir string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "in.jsonl")
	lines := []string{enqueueLine("E1", 1), "", enqueueLine("E2", 1), enqueueLine("E1", 1)}
	os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	out := mustCLI(t, "enqueue", "-f", file, "--data-dir", dir, "--store-id", "S0042")
	if !strings.Contains(out, "accepted 2, duplicates 1, rejected 0") {
		t.Fatalf("first enqueue:\n%s", out)
	}

	lines = []string{enqueueLine("E1", 1), enqueueLine("E2", 7), `{"movement_id":"E3","unit":"KG"}`, enqueueLine("E4", 1)}
	os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o600)
	stdout, stderr, code := runCLI(t, "enqueue", "-f", file, "--data-dir", dir, "--json")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (lines rejected)\n%s\n%s", code, stdout, stderr)
	}
	var sum enqueueSummary
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if sum.Accepted != 1 || sum.Duplicates != 1 || sum.Rejected != 2 || len(sum.Rejections) != 2 {
		t.Fatalf("summary %+v", sum)
	}
	if r := sum.Rejections[0]; r.Line != 2 || r.Errors[0].Field != "movement_id" || !strings.Contains(r.Errors[0].Error, "different content") {
		t.Fatalf("conflict reported as %+v", r)
	}
	if r := sum.Rejections[1]; r.Line != 3 || len(r.Errors) < 2 {
		t.Fatalf("invalid line reported as %+v", r)
	}
}

func TestEnqueueDirectlyIntoTheFile(t *testing.T) {
	dir := t.TempDir()
	checkEnqueue(t, dir)
	out := mustCLI(t, "status", "--data-dir", dir, "--json")
	if !strings.Contains(out, `"total": 3`) {
		t.Fatalf("status after enqueue:\n%s", out)
	}
}

func TestEnqueueThroughTheRunningAgent(t *testing.T) {
	dir := t.TempDir()
	runDaemon(t, localOptions(t, dir), nil)
	checkEnqueue(t, dir)
	var st struct {
		Agent struct{ Running bool } `json:"agent"`
	}
	json.Unmarshal([]byte(mustCLI(t, "status", "--data-dir", dir, "--json")), &st)
	if !st.Agent.Running {
		t.Fatal("status did not come from the running agent")
	}
}
