package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/intake/hl7"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/natstest"
)

// patientMarker is written into every patient field the tests send; it
// must come out nowhere.
const patientMarker = "ZQXPATIENTMARKER"

// mllpClientDir holds the npm MLLP client (node-hl7-client).
var mllpClientDir = filepath.Join("..", "..", "intake", "hl7", "testdata", "mllpclient")

// node returns the node binary, with the npm client installed; without
// node the test is skipped, except under CI, which must provide it.
func node(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is not installed: .ci/run must install it for the HL7 client tests")
		}
		t.Skip("node is not installed: the HL7 tests with the npm MLLP client need node and npm")
	}
	if _, err := os.Stat(filepath.Join(mllpClientDir, "node_modules", "node-hl7-client")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = mllpClientDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
	return bin
}

type nodeAck struct {
	MSA1 string   `json:"msa1"`
	MSA2 string   `json:"msa2"`
	MSA3 string   `json:"msa3"`
	Errs []string `json:"errs"`
}

// sendNode sends msgs with the npm client, one connection, each ACK
// awaited, and returns the ACKs as the client read them.
func sendNode(t *testing.T, addr string, msgs []string) []nodeAck {
	t.Helper()
	bin := node(t)
	_, port, _ := net.SplitHostPort(addr)
	f := filepath.Join(t.TempDir(), "msgs.json")
	b, _ := json.Marshal(msgs)
	os.WriteFile(f, b, 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "send.mjs", port, f)
	cmd.Dir = mllpClientDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node send.mjs: %v\n%s", err, stderr.String())
	}
	var acks []nodeAck
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var a nodeAck
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	if len(acks) != len(msgs) {
		t.Fatalf("%d ACKs for %d messages: %s %s", len(acks), len(msgs), out, stderr.String())
	}
	return acks
}

// rdsMessage is a realistic RDS^O13 whose patient segments (PID, PV1,
// NK1, IN1) carry the marker in every field a patient's data goes in.
func rdsMessage(ctl, rx, sub string) string {
	m := patientMarker
	rxe := make([]string, 36)
	rxe[0], rxe[2], rxe[3], rxe[5], rxe[10], rxe[11], rxe[35] = "RXE", "00406-0552-62^Oxycodone 5 mg tab^NDC", "5", "TAB", "30", "EA", "II"
	return strings.Join([]string{
		"MSH|^~\\&|PHARMSYS|STORE42|RXEDGE|S0042|20260301093000-0500||RDS^O13^RDS_O13|" + ctl + "|P|2.5.1",
		"PID|1|" + m + "EXT|" + m + "MRN^^^HOSP^MR~" + m + "SSN^^^SSA^SS|" + m + "ALT|" + m + "LAST^" + m + "FIRST^Q||19700101|F|" + m + "ALIAS||1 " + m + " ST^^" + m + "TOWN^NY^10001||555" + m + "^PRN^PH|555" + m + "W|||||" + m + "ACCT|" + m + "SSN|" + m + "DL",
		"PV1|1|O|" + m + "WARD^101^A||||1234^" + m + "DOC^JANE|||||||||||" + m + "VISIT",
		"NK1|1|" + m + "KIN^ANNA|SPO|2 " + m + " RD^^TOWN^NY|555" + m,
		"IN1|1|PLAN1|" + m + "INSID|" + m + "INSCO|||||" + m + "GROUP||||||" + m + "INSURED^X|SEL|" + m + "DOB|" + m + "ADDR",
		"ORC|RE|" + m + "PLACER|FILL1",
		strings.Join(rxe, "|"),
		"RXD|" + sub + "|00406-0552-62^Oxycodone 5 mg tab^NDC|202603010930-0500|30|EA||" + rx,
	}, "\r") + "\r"
}

// intakeAgent starts the built agent with the HL7 listener, the ASAP
// folder and a formulary, sending to hub.
func intakeAgent(t *testing.T, dir, ingest, hl7Addr, asapDir string, hub *natstest.Server) *agent {
	t.Helper()
	form := filepath.Join(dir, "formulary.csv")
	os.WriteFile(form, []byte("ndc,schedule\n00406-0552-62,CII\n00054-0237-25,CII\n0591-0384-01,CIV\n"), 0o600)
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte("intake:\n  formulary: "+form+"\n  asap:\n    poll_interval: 100ms\n"), 0o600)
	return startAgent(t, filepath.Join(dir, "data"), ingest, nil, "--config", cfg, "--hl7-listen", hl7Addr, "--asap-dir", asapDir,
		"--nats", hub.URL(), "--log-level", "debug")
}

type statusDoc struct {
	Counts struct {
		Pending, Synced struct{ Total int }
	}
	Intakes []struct {
		Name                           string
		Accepted, Duplicates, Rejected int
	}
}

func agentStatus(t *testing.T, data string) (statusDoc, string) {
	t.Helper()
	cmd := exec.Command(agentbin.Build(t), "status", "--json", "--data-dir", data)
	out, _ := cmd.Output() // exit 3 is a judgement, not a failure
	var s statusDoc
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("agent status --json: %v\n%s", err, out)
	}
	return s, string(out)
}

// waitFor polls cond every 50ms until it holds, failing after a minute
// with what was awaited.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// centralMessages is every movement central holds for S0042.
func centralMessages(t *testing.T, hub *natstest.Server) []*jetstream.RawStreamMsg {
	t.Helper()
	nc := natstest.Connect(t, hub.URL())
	js := natstest.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted or not there
		}
		if ledger.IsCheckpointToken(m.Header.Get(central.HeaderMsgID)) {
			continue // the store's checkpoint, not a movement
		}
		out = append(out, m)
	}
	return out
}

// TestHL7KillBetweenCommitAndAck sends a dispense, waits until the agent
// has committed it, and kills the built agent with SIGKILL before the
// sender reads its ACK: the sender saw no AA. After a restart the npm
// client resends the dispense, under the same and under a new control id:
// both are answered AA, and central stores it once.
func TestHL7KillBetweenCommitAndAck(t *testing.T) {
	node(t)
	hub := natstest.StartHub(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	ingest, hl7Addr, asapDir := agentbin.FreeAddr(t), agentbin.FreeAddr(t), filepath.Join(dir, "asap")
	a := intakeAgent(t, dir, ingest, hl7Addr, asapDir, hub)

	c, err := net.Dial("tcp", hl7Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The ACK is never read from c: for this sender the agent died before
	// answering.
	if _, err := c.Write(hl7.AppendFrame(nil, []byte(rdsMessage("K1", "RXKILL1", "1")))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dispense to be committed (status: one movement held)", func() bool {
		s, _ := agentStatus(t, data)
		return s.Counts.Pending.Total+s.Counts.Synced.Total == 1
	})
	a.cmd.Process.Kill() // SIGKILL
	<-a.exited

	a = intakeAgent(t, dir, ingest, hl7Addr, asapDir, hub)
	acks := sendNode(t, hl7Addr, []string{rdsMessage("K1", "RXKILL1", "1"), rdsMessage("K2", "RXKILL1", "1")})
	for i, ack := range acks {
		if ack.MSA1 != "AA" {
			t.Fatalf("resend %d: %+v, want AA", i, ack)
		}
	}
	waitFor(t, "the dispense to be synced to central", func() bool {
		s, _ := agentStatus(t, data)
		return s.Counts.Synced.Total == 1 && s.Counts.Pending.Total == 0
	})
	msgs := centralMessages(t, hub)
	if len(msgs) != 1 {
		t.Fatalf("central holds %d messages, want 1", len(msgs))
	}
	if !bytes.Contains(msgs[0].Data, []byte(`"movement_id":"hl7:RXKILL1:1"`)) {
		t.Fatalf("central holds %s", msgs[0].Data)
	}
	s, _ := agentStatus(t, data)
	if len(s.Intakes) != 3 || s.Intakes[1].Name != "hl7" || s.Intakes[1].Duplicates != 2 {
		t.Errorf("status intakes %+v, want hl7 with 2 duplicates since the restart", s.Intakes)
	}
	a.kill()
}

// TestIntakesLeakNoPatientData feeds both intakes messages and files with
// the marker in every patient field (HL7 PID, PV1, NK1, IN1; ASAP PAT, and
// the prescriber's and pick-up person's personal fields), valid and
// refused, then looks for the marker in every output: the agent's logs,
// its metrics and status, the audit journal, a quarantine export, the
// ASAP reports, what central stores (bodies and headers), and the bytes
// of the data file.
func TestIntakesLeakNoPatientData(t *testing.T) {
	node(t)
	hub := natstest.StartHub(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	ingest, hl7Addr, asapDir := agentbin.FreeAddr(t), agentbin.FreeAddr(t), filepath.Join(dir, "asap")
	// Central is down while the intakes take everything: the movements
	// stay pending, payloads and all, in the data file searched below.
	hub.Stop()
	a := intakeAgent(t, dir, ingest, hl7Addr, asapDir, hub)

	bad := strings.Replace(rdsMessage("P3", "RXP2", "1"), "-0500|30|EA|", "-0500|30|BOX|", 1)
	unsupported := strings.Replace(rdsMessage("P4", "RXP3", "1"), "RDS^O13^RDS_O13", "ADT^A08^ADT_A01", 1)
	acks := sendNode(t, hl7Addr, []string{rdsMessage("P1", "RXP1", "1"), rdsMessage("P2", "RXP1", "1"), bad, unsupported})
	if got := acks[0].MSA1 + acks[1].MSA1 + acks[2].MSA1 + acks[3].MSA1; got != "AAAAAEAR" {
		t.Fatalf("ACKs %s, want AA AA AE AR", got)
	}
	for _, s := range []string{"sample-4.2A.asap", "sample-4.2B.asap"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "intake", "asap", "testdata", s))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(patientMarker)) {
			t.Fatalf("%s carries no marker", s)
		}
		os.WriteFile(filepath.Join(asapDir, s+".tmp"), b, 0o600)
		os.Rename(filepath.Join(asapDir, s+".tmp"), filepath.Join(asapDir, s))
	}
	waitFor(t, "both ASAP files to be taken (moved to rejected/, each has a refused record)", func() bool {
		_, e1 := os.Stat(filepath.Join(asapDir, "rejected", "sample-4.2A.asap"))
		_, e2 := os.Stat(filepath.Join(asapDir, "rejected", "sample-4.2B.asap"))
		return e1 == nil && e2 == nil
	})
	// HL7 RXP1, ASAP RXA100, RXA101, RXB200, RXB202.
	waitFor(t, "five movements pending", func() bool {
		s, _ := agentStatus(t, data)
		return s.Counts.Pending.Total == 5
	})
	outputs := map[string][]byte{}
	// What the agent that took them shows: its status and metrics count
	// both intakes.
	st, stText := agentStatus(t, data)
	outputs["status while pending"] = []byte(stText)
	if len(st.Intakes) != 3 || st.Intakes[1].Accepted != 1 || st.Intakes[1].Duplicates != 1 || st.Intakes[1].Rejected != 2 || st.Intakes[2].Accepted != 4 || st.Intakes[2].Duplicates != 2 || st.Intakes[2].Rejected != 3 {
		t.Errorf("status intakes %+v, want hl7 1 accepted, 1 duplicate, 2 rejected; asap 4, 2, 3", st.Intakes)
	}
	outputs["metrics while pending"] = scrape(t, ingest)
	for _, want := range []string{
		`rxedge_intake_movements_total{intake="hl7",result="accepted"} 1`,
		`rxedge_intake_movements_total{intake="asap",result="accepted"} 4`,
		`rxedge_intake_files_total{result="rejected"} 2`,
	} {
		if !bytes.Contains(outputs["metrics while pending"], []byte(want)) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(outputs["metrics while pending"], "rxedge_intake"))
		}
	}
	// SIGKILL, then read the file as the crash left it (bbolt locks it
	// while the agent runs, on Windows against reading too): every payload
	// is in it, pending.
	a.kill()
	outputs["logs before the restart"] = []byte(a.stderr.String())
	outputs["data file while pending"], _ = os.ReadFile(dataFile(data))
	if !bytes.Contains(outputs["data file while pending"], []byte(`"rx_ref":"RXP1"`)) || !bytes.Contains(outputs["data file while pending"], []byte(`"rx_ref":"RXB202"`)) {
		t.Error("the pending dispenses are not in the data file: the search below proves nothing")
	}
	hub.Restart(t)
	a = intakeAgent(t, dir, ingest, hl7Addr, asapDir, hub)
	waitFor(t, "five movements synced", func() bool {
		s, _ := agentStatus(t, data)
		return s.Counts.Synced.Total == 5 && s.Counts.Pending.Total == 0
	})

	_, stText = agentStatus(t, data)
	outputs["status"] = []byte(stText)
	outputs["metrics"] = scrape(t, ingest)
	for _, m := range centralMessages(t, hub) {
		outputs["central"] = append(outputs["central"], m.Data...)
		outputs["central"] = append(outputs["central"], fmt.Sprint(m.Header)...)
	}
	for _, f := range []string{"sample-4.2A.asap.report.json", "sample-4.2B.asap.report.json"} {
		outputs["report "+f], _ = os.ReadFile(filepath.Join(asapDir, "rejected", f))
	}
	a.kill() // SIGKILL: the file is read as a crash leaves it
	outputs["logs"] = []byte(a.stderr.String())
	exp := filepath.Join(dir, "export.jsonl")
	out, err := exec.Command(agentbin.Build(t), "dlq", "export", "--data-dir", data, "-o", exp).CombinedOutput()
	if err != nil {
		t.Fatalf("dlq export: %v\n%s", err, out)
	}
	outputs["export"], _ = os.ReadFile(exp)
	outputs["journal"], _ = exec.Command(agentbin.Build(t), "audit", "--data-dir", data, "--json").Output()
	outputs["data file"], _ = os.ReadFile(dataFile(data))

	for name, b := range outputs {
		if len(b) == 0 && name != "export" {
			t.Errorf("%s: empty, so the search proves nothing", name)
		}
		if i := bytes.Index(b, []byte(patientMarker)); i >= 0 {
			t.Errorf("%s holds patient data at byte %d: %q", name, i, b[max(0, i-80):min(len(b), i+40)])
		}
	}
	if !bytes.Contains(outputs["central"], []byte(`"rx_ref":"RXP1"`)) || !bytes.Contains(outputs["central"], []byte(`"rx_ref":"RXB202"`)) {
		t.Error("the dispenses are not in central: the search there proves nothing")
	}
}

// scrape reads the agent's metrics.
func scrape(t *testing.T, ingest string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + ingest + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func grepLines(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// dropFile writes a file into the folder under a short temporary name and
// renames it in, as a pharmacy system should.
func dropFile(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	tmp := filepath.Join(dir, "drop.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}
