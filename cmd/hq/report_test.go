package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// reportHistory is a store's first three quarters of one Schedule II
// product, spelled three ways, and of another NDC seen in two units.
var reportHistory = []string{
	`{"movement_id":"RCV-1","type":"receive","ndc":"00591-0540-01","quantity":100,"unit":"EA","occurred_at":"2026-01-05T10:00:00Z","schedule":"CII","dea_form_222":"X1234567"}`,
	`{"movement_id":"DSP-1","type":"dispense","ndc":"00591054001","quantity":60,"unit":"EA","occurred_at":"2026-02-01T10:00:00Z","schedule":"CII","rx_ref":"RX-1"}`,
	`{"movement_id":"CNT-1","type":"count","count_kind":"quarterly","ndc":"0591-0540-01","quantity":38,"unit":"EA","occurred_at":"2026-03-31T20:00:00Z","schedule":"CII"}`,
	`{"movement_id":"ADJ-1","type":"adjust_out","reason":"count_correction","ndc":"00591-0540-01","quantity":2,"unit":"EA","occurred_at":"2026-03-31T20:05:00Z","schedule":"CII"}`,
	`{"movement_id":"THF-1","type":"adjust_out","reason":"theft","ndc":"00591-0540-01","quantity":12,"unit":"EA","occurred_at":"2026-07-03T18:00:00Z","schedule":"CII"}`,
	`{"movement_id":"RCV-2","type":"receive","ndc":"00002-3227-30","quantity":10,"unit":"EA","occurred_at":"2026-01-06T10:00:00Z","schedule":"CII","dea_form_222":"X7654321"}`,
	`{"movement_id":"DSP-2","type":"dispense","ndc":"00002-3227-30","quantity":1,"unit":"ML","occurred_at":"2026-01-07T10:00:00Z","schedule":"CII"}`,
}

// reportDatabase fills a real PostgreSQL with reportHistory through a
// real central and the built hq's sink, and returns the built hq and the
// flags that reach the database.
func reportDatabase(t *testing.T) (bin string, pgArgs []string) {
	t.Helper()
	bin = agentbin.BuildHQ(t)
	pg := pgtest.Start(t)
	const pw = "r3port-Pa55"
	pg.Exec(t, "postgres", `CREATE ROLE reportowner LOGIN PASSWORD '`+pw+`'`)
	pg.Exec(t, "postgres", `CREATE DATABASE reports OWNER reportowner`)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pg.password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pgArgs = []string{"--postgres", pg.URL("reportowner", "", "reports"), "--postgres-password-file", pwFile}
	srv := natstest.StartHub(t)
	js := natstest.JetStream(t, natstest.Connect(t, srv.URL()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, body := range reportHistory {
		p, es := movement.Prepare([]byte(body), "S0042", time.Date(2026, 7, 4, 0, 0, 0, 0, time.UTC))
		if es != nil {
			t.Fatalf("movement %d: %v", i, es)
		}
		m := central.Message{Store: "S0042", Key: p.KeyString(), Digest: fmt.Sprintf("%x", p.Digest), Seq: uint64(i + 1), Schedule: p.Schedule, EnqueuedAt: time.Now(), Payload: p.Payload}
		if _, err := js.PublishMsg(ctx, m.Msg()); err != nil {
			t.Fatal(err)
		}
	}
	waitArchive(t, js, uint64(len(reportHistory)))
	if code, out, errs := hqRun(t, bin, append([]string{"sink", "--until-caught-up", "--server", srv.URL()}, pgArgs...)...); code != 0 {
		t.Fatalf("sink --until-caught-up: exit %d\n%s%s", code, out, errs)
	}
	return bin, pgArgs
}

// TestReportKindsThroughTheBinary runs every report the sink offers
// through the built hq against a real PostgreSQL the sink filled from a
// real central: each kind reachable, --quarter as a period, the NDC in
// any spelling, and the refusals: a bad kind, --store missing for the
// reconciliation, a bad quarter, --quarter with --from, a bad NDC (exit 2,
// saying what an NDC is), and an NDC that matches nothing (exit 1, said
// on stderr).
func TestReportKindsThroughTheBinary(t *testing.T) {
	bin, pgArgs := reportDatabase(t)
	report := func(args ...string) (int, []map[string]string, string) {
		t.Helper()
		code, out, errs := hqRun(t, bin, append(append([]string{"report"}, args...), append([]string{"--json"}, pgArgs...)...)...)
		var rows []map[string]string
		if code != cli.ExitUsage && json.Unmarshal([]byte(out), &rows) != nil {
			t.Fatalf("report %v --json: exit %d, printed %q\n%s", args, code, out, errs)
		}
		return code, rows, errs
	}

	// Every kind, with what it needs.
	for _, tc := range []struct {
		args []string
		rows int
	}{
		{[]string{sink.ReportBalances}, 3}, // 00002-3227-30 in EA and in ML, flagged mixed_units
		{[]string{sink.ReportInventory, "--store", "S0042", "--ndc", "0591-0540-01", "--quarter", "2026Q1"}, 3},
		{[]string{sink.ReportScheduleII, "--store", "S0042", "--quarter", "2026Q3"}, 1},
		{[]string{sink.ReportRx, "--rx-ref", "RX-1"}, 1},
		{[]string{sink.ReportCounts, "--ndc", "00591054001"}, 1},
		{[]string{sink.ReportReconciliation, "--store", "S0042", "--quarter", "2026Q1"}, 1},
		{[]string{sink.ReportForm106, "--quarter", "2026-Q3"}, 1},
		{[]string{sink.ReportUnits, "--store", "S0042"}, 2}, // a row per unit of the one NDC
	} {
		code, rows, errs := report(tc.args...)
		if code != 0 || len(rows) != tc.rows {
			t.Errorf("report %s: exit %d, %d rows, want 0 and %d\n%v\n%s", strings.Join(tc.args, " "), code, len(rows), tc.rows, rows, errs)
		}
	}
	_, rows, _ := report(sink.ReportBalances, "--ndc", "00591-0540-01")
	if len(rows) != 1 || !strings.HasPrefix(rows[0]["balance"], "26") {
		t.Errorf("balance of 00591-0540-01: %v, want 100 - 60 - 2 - 12 = 26", rows)
	}
	_, rows, _ = report(sink.ReportReconciliation, "--store", "S0042", "--quarter", "2026Q1")
	if len(rows) == 1 && (!strings.HasPrefix(rows[0]["counted"], "38") || !strings.HasPrefix(rows[0]["expected"], "40")) {
		t.Errorf("reconciliation of 2026Q1: %v, want 40 expected and 38 counted", rows[0])
	}
	code, out, errs := hqRun(t, bin, append([]string{"report", sink.ReportForm106, "--store", "S0042", "--csv"}, pgArgs...)...)
	if recs, err := csv.NewReader(strings.NewReader(out)).ReadAll(); code != 0 || err != nil || len(recs) != 2 {
		t.Errorf("report form-106 --csv: exit %d, %v\n%s%s", code, err, out, errs)
	}

	// The usage text lists every kind.
	_, help, _ := hqRun(t, bin, "report", "--help")
	for _, k := range sink.Reports {
		if !strings.Contains(help, "  "+k+" ") {
			t.Errorf("report --help does not describe %s:\n%s", k, help)
		}
	}

	reportRefusals(t, report)
}

// reportRefusals runs the report command lines that are refused before
// anything connects (exit 2, saying why), and one whose --ndc matches
// nothing (exit 1, said on stderr, the empty report on stdout).
func reportRefusals(t *testing.T, report func(args ...string) (int, []map[string]string, string)) {
	t.Helper()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"everything"}, "form-106"},
		{[]string{sink.ReportReconciliation, "--quarter", "2026Q1"}, "--store"},
		{[]string{sink.ReportCounts, "--quarter", "2026Q5"}, "2026Q1"},
		{[]string{sink.ReportCounts, "--quarter", "2026Q1", "--from", "2026-01-01"}, "--quarter"},
		{[]string{sink.ReportBalances, "--quarter", "2026Q1"}, "no period"},
		{[]string{sink.ReportInventory, "--store", "S0042", "--ndc", "591-540-1"}, "4-4-2"},
	} {
		code, _, errs := report(tc.args...)
		if code != cli.ExitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("report %s: exit %d, %q; want %d saying %q", strings.Join(tc.args, " "), code, errs, cli.ExitUsage, tc.want)
		}
	}
	code, rows, errs := report(sink.ReportInventory, "--store", "S0042", "--ndc", "00591-0540-02")
	if code != cli.ExitError || len(rows) != 0 || !strings.Contains(errs, "no rows match --ndc 00591-0540-02 at store S0042") {
		t.Errorf("an NDC with no movements: exit %d, %d rows, %q; want %d and the NDC named", code, len(rows), errs, cli.ExitError)
	}
}
