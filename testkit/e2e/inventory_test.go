package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// rdsOf is rdsMessage with its product (RXE-2, RXD-2), quantity and unit
// (RXD-4, RXD-5) replaced.
func rdsOf(ctl, rx, ndc, qty, unit string) string {
	m := strings.ReplaceAll(rdsMessage(ctl, rx, "1"), "00406-0552-62", ndc)
	return strings.Replace(m, "|30|EA||"+rx, "|"+qty+"|"+unit+"||"+rx, 1)
}

// asapOf is an ASAP 4.2A file of one dispense per NDC and units code
// (DSP08, DSP11), of quantity qty.
func asapOf(ctl string, qty string, dsps ...[2]string) []byte {
	var b strings.Builder
	b.WriteString("TH*4.2A*" + ctl + "*01**20260302*101500*P**~~\n")
	for i, d := range dsps {
		b.WriteString("PAT*NY*06*" + patientMarker + "~\n")
		b.WriteString("DSP*00*RX" + ctl + string(rune('A'+i)) + "*20260301*0*20260301*00*01*" + d[0] + "*" + qty + "**" + d[1] + "~\n")
	}
	b.WriteString("TT*" + ctl + "*" + strconv.Itoa(2+2*len(dsps)) + "~\n")
	return []byte(b.String())
}

// postOne submits one movement as JSON and returns the status and body.
func postOne(t *testing.T, addr, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/movements", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestOneProductAcrossIntakes drives the built agent as the new
// user did: one Schedule II product received over HTTP as 00591-0540-01,
// dispensed in an ASAP file as 00591054001 and over HL7 (MLLP, the npm
// client) as 0591-0540-01, with a formulary that gives its unit. Each
// intake refuses a bare 10-digit NDC, saying it is ambiguous, and the
// product in another unit, naming the formulary's; central holds the three
// movements, the sink copies them into PostgreSQL, and head office's
// reports find one product with balance -20 by any spelling.
func TestOneProductAcrossIntakes(t *testing.T) {
	node(t)
	pg := pgtest.Start(t)
	hub := natstest.StartHub(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	ingest, hl7Addr, asapDir := agentbin.FreeAddr(t), agentbin.FreeAddr(t), filepath.Join(dir, "asap")
	form := filepath.Join(dir, "formulary.csv")
	os.WriteFile(form, []byte("ndc,schedule,unit\n00591-0540-01,CII,EA\n"), 0o600)
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte("intake:\n  formulary: "+form+"\n  asap:\n    poll_interval: 100ms\n"), 0o600)
	startAgent(t, data, ingest, nil, "--config", cfg, "--hl7-listen", hl7Addr, "--asap-dir", asapDir, "--nats", hub.URL())

	checkHTTPIntake(t, ingest)
	checkASAPIntake(t, asapDir)
	acks := sendNode(t, hl7Addr, []string{
		rdsOf("H1", "RXH1", "0591-0540-01", "60", "EA"),
		rdsOf("H2", "RXH2", "1234567890", "60", "EA"),
		rdsOf("H3", "RXH3", "0591-0540-01", "60", "mL"),
	})
	if acks[0].MSA1 != "AA" || acks[1].MSA1 != "AE" || !strings.Contains(acks[1].MSA3, "ambiguous") ||
		acks[2].MSA1 != "AE" || !strings.Contains(acks[2].MSA3, "must be EA") {
		t.Fatalf("HL7 ACKs: %+v", acks)
	}
	waitFor(t, "the three movements to be synced to central", func() bool {
		s, _ := agentStatus(t, data)
		return s.Counts.Synced.Total == 3 && s.Counts.Pending.Total == 0
	})
	conn := sinkInto(t, pg, hub, 3)
	ctx := context.Background()
	for _, ndc := range []string{"00591-0540-01", "00591054001", "0591-0540-01", "0591054001"} {
		tab, err := sink.Report(ctx, conn, sink.ReportQuery{Kind: sink.ReportBalances, NDC: ndc})
		if err != nil {
			t.Fatal(err)
		}
		if len(tab.Rows) != 1 || tab.Rows[0][1] != "00591-0540-01" || tab.Rows[0][4] != "-20.000000" {
			t.Errorf("balances --ndc %s: %v, want one product with -20", ndc, tab.Rows)
		}
		tab, err = sink.Report(ctx, conn, sink.ReportQuery{Kind: sink.ReportInventory, Store: "S0042", NDC: ndc})
		if err != nil || len(tab.Rows) != 3 {
			t.Errorf("inventory --ndc %s: %v %v, want the receipt and both dispenses", ndc, tab, err)
		}
	}
}

// checkHTTPIntake receives 100 over HTTP and sees the two refusals.
func checkHTTPIntake(t *testing.T, ingest string) {
	t.Helper()
	mv := func(id, ndc, unit string) string {
		return `{"movement_id":"` + id + `","type":"receive","ndc":"` + ndc + `","quantity":100,"unit":"` + unit +
			`","occurred_at":"2026-03-01T08:00:00Z","schedule":"CII","dea_form_222":"X1234567"}`
	}
	for _, c := range []struct {
		body     string
		code     int
		contains string
	}{
		{mv("R1", "00591-0540-01", "EA"), 202, `"duplicate":false`},
		{mv("R2", "1234567890", "EA"), 400, "ambiguous"},
		{mv("R3", "00591-0540-01", "ML"), 422, "must be EA"},
	} {
		if code, body := postOne(t, ingest, c.body); code != c.code || !strings.Contains(body, c.contains) {
			t.Errorf("HTTP: %d %s, want %d with %q", code, body, c.code, c.contains)
		}
	}
}

// checkASAPIntake drops a file with the dispense and one with the two
// refused ones, and reads the rejected file's report.
func checkASAPIntake(t *testing.T, asapDir string) {
	t.Helper()
	dropFile(t, asapDir, "good.asap", asapOf("G1", "60", [2]string{"00591054001", "01"}))
	dropFile(t, asapDir, "bad.asap", asapOf("B1", "60", [2]string{"1234567890", "01"}, [2]string{"00591054001", "02"}))
	report := filepath.Join(asapDir, "rejected", "bad.asap.report.json")
	waitFor(t, "the ASAP files to be taken", func() bool {
		_, err1 := os.Stat(filepath.Join(asapDir, "done", "good.asap"))
		_, err2 := os.Stat(report)
		return err1 == nil && err2 == nil
	})
	b, _ := os.ReadFile(report)
	if !strings.Contains(string(b), "DSP08") || !strings.Contains(string(b), "ambiguous") ||
		!strings.Contains(string(b), "DSP11") || !strings.Contains(string(b), "must be EA") {
		t.Errorf("the ASAP report: %s", b)
	}
}

// sinkInto copies hub's archive, once it holds n movements, into a new
// database of pg, and returns a connection to it.
func sinkInto(t *testing.T, pg *pgtest.Server, hub *natstest.Server, n int) *pgx.Conn {
	t.Helper()
	nc := natstest.Connect(t, hub.URL())
	js := natstest.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitFor(t, "the archive to hold the movements", func() bool {
		s, err := js.Stream(ctx, central.ArchiveStreamName)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs >= uint64(n)
	})
	name := pg.CreateDB(t, "inventory")
	conn, err := pgx.Connect(ctx, pg.SuperURL(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := sink.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(pg.SuperURL(name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Run(ctx, sink.Options{Conn: nc, Archives: []string{central.ArchiveStreamName}, Postgres: cfg, UntilCaughtUp: true}); err != nil {
		t.Fatal(err)
	}
	return conn
}
