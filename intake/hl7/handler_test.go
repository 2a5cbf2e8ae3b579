package hl7

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/dlqtest"
)

// Marker is written in every patient field of the test messages; it must
// never come out anywhere.
const Marker = "ZQXPATIENTMARKER"

// rds is a realistic RDS^O13 with patient segments full of markers.
func rds(ctl, rx, sub, ndc, qty, unit, sched string) string {
	m := Marker
	segs := []string{
		"MSH|^~\\&|PHARMSYS|STORE42|RXEDGE|S0042|20260301093000-0500||RDS^O13^RDS_O13|" + ctl + "|P|2.5.1|||AL|NE",
		"PID|1||" + m + "MRN^^^HOSP^MR~" + m + "SSN^^^SSA^SS||" + m + "LAST^" + m + "FIRST^Q||19700101" + m + "|F|||1 " + m + " ST^^TOWN" + m + "^NY^10001||555" + m + "^PRN^PH|||||" + m + "ACCT|" + m + "SSN",
		"PV1|1|O|" + m + "WARD^101^A||||1234^" + m + "DOC^JANE",
		"NK1|1|" + m + "KIN^ANNA|SPO|2 " + m + " RD^^TOWN^NY|555" + m,
		"IN1|1|PLAN1|" + m + "INSID|" + m + "INSCO|||||" + m + "GROUP||||||||" + m + "INSURED",
		"ORC|RE|" + m + "PLACER|FILL1",
		rxe(ndc, sched),
		"RXD|" + sub + "|" + ndc + "^Oxycodone 5 mg tab^NDC|202603010930-0500|" + qty + "|" + unit + "||" + rx,
	}
	return strings.Join(segs, "\r") + "\r"
}

// rxe is an RXE with the give code (RXE-2), units (RXE-5) and the
// controlled substance schedule in RXE-35.
func rxe(ndc, sched string) string {
	f := make([]string, 36)
	f[0], f[1], f[2], f[3], f[5], f[10], f[11], f[35] = "RXE", "^^^20260301", ndc+"^Oxycodone 5 mg tab^NDC", "5", "TAB", "30", "EA", sched
	return strings.Join(f, "|")
}

func newHandler(t *testing.T) (*Handler, *queue.Queue) {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: "S0042"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	now := time.Date(2026, 3, 1, 15, 0, 0, 0, time.UTC)
	return &Handler{Sink: &intake.Sink{Queue: q, StoreID: "S0042", Clock: func() time.Time { return now }}, Counter: new(intake.Counter)}, q
}

func ackParts(t *testing.T, ack []byte) (code, ctl string, errs []string) {
	t.Helper()
	m, err := Parse(ack)
	if err != nil {
		t.Fatalf("the ack does not parse: %v\n%s", err, ack)
	}
	msa := m.Find("MSA")
	if len(msa) != 1 {
		t.Fatalf("ack without one MSA:\n%q", ack)
	}
	code, _ = m.Get(msa[0], 1, 1, 0, 0)
	ctl, _ = m.Get(msa[0], 2, 1, 0, 0)
	for _, e := range m.Find("ERR") {
		errs = append(errs, e.Raw(2)+"|"+e.Raw(3))
	}
	return
}

func TestHandleAcks(t *testing.T) {
	h, q := newHandler(t)
	store := func(msg string) (string, string, []string, Outcome) {
		ack, out := h.Handle([]byte(msg))
		if bytes.Contains(ack, []byte(Marker)) {
			t.Fatalf("the ack holds a patient value:\n%q", ack)
		}
		c, ctl, errs := ackParts(t, ack)
		return c, ctl, errs, out
	}
	code, ctl, errs, out := store(rds("C1", "RX100", "1", "12345-6789-01", "30", "EA", "II"))
	if code != AA || ctl != "C1" || len(errs) != 0 || out.Accepted != 1 {
		t.Fatalf("first dispense: %s %s %v %+v", code, ctl, errs, out)
	}
	// The same dispense under a new control id: stored once, AA.
	code, ctl, _, out = store(rds("C2", "RX100", "1", "12345-6789-01", "30", "EA", "II"))
	if code != AA || ctl != "C2" || out.Duplicates != 1 || out.Accepted != 0 {
		t.Fatalf("resent dispense: %s %s %+v", code, ctl, out)
	}
	st, _ := q.Stats()
	if n := st.Count(queue.Pending); n != 1 {
		t.Fatalf("%d pending after a resend, want 1", n)
	}
	// The stored payload: mapped fields, no patient data.
	var payload []byte
	payload = dlqtest.Pending(t, q)[0].Payload
	want := `{"movement_id":"hl7:RX100:1","store_id":"S0042","type":"dispense","ndc":"12345-6789-01","quantity":"30","unit":"EA","occurred_at":"2026-03-01T09:30:00-05:00","schedule":"CII","rx_ref":"RX100"}`
	if string(payload) != want {
		t.Fatalf("payload\n got %s\nwant %s", payload, want)
	}

	for _, c := range []struct {
		name, msg, code, err string
	}{
		{"a bad NDC", rds("C3", "RX101", "1", "12345", "30", "EA", "II"), AE, "RXD^1^2^1^1|102"},
		{"no quantity", rds("C4", "RX101", "1", "12345-6789-01", "", "EA", ""), AE, "RXD^1^4^1|101"},
		{"a sign for a quantity", rds("C4", "RX101", "1", "12345-6789-01", "-", "EA", ""), AE, "RXD^1^4^1|101"},
		{"a quantity of letters", rds("C4", "RX101", "1", "12345-6789-01", "ten", "EA", ""), AE, "RXD^1^4^1|102"},
		{"an unknown unit", rds("C5", "RX101", "1", "12345-6789-01", "3", "BOX", ""), AE, "RXD^1^5^1^1|103"},
		{"schedule I", rds("C6", "RX101", "1", "12345-6789-01", "3", "EA", "I"), AE, "RXE^1^35^1^1|103"},
		{"no prescription number", rds("C7", "", "1", "12345-6789-01", "3", "EA", ""), AE, "RXD^1^7^1|101"},
		{"the same dispense with other content", rds("C8", "RX100", "1", "12345-6789-01", "31", "EA", "II"), AE, "RXD^1^7^1|205"},
		{"an unsupported type", strings.Replace(rds("C9", "RX102", "1", "12345-6789-01", "3", "EA", ""), "RDS^O13^RDS_O13", "ADT^A01^ADT_A01", 1), AR, "MSH^1^9^1|200"},
		{"no control id", rds("", "RX102", "1", "12345-6789-01", "3", "EA", ""), AR, "MSH^1^10^1|101"},
		{"a malformed message", "PID|1||x\r", AR, "MSH^1|100"},
		{"a bad escape", rds("C10", "RX\\Q\\", "1", "12345-6789-01", "3", "EA", ""), AE, "RXD^1^7^1|102"},
	} {
		code, ctl, errs, _ := store(c.msg)
		if code != c.code {
			t.Errorf("%s: %s, want %s (%v)", c.name, code, c.code, errs)
			continue
		}
		if len(errs) == 0 || !strings.HasPrefix(errs[0], c.err) {
			t.Errorf("%s: ERR %v, want %s", c.name, errs, c.err)
		}
		if c.name != "no control id" && c.name != "a malformed message" && ctl == "" {
			t.Errorf("%s: MSA-2 empty", c.name)
		}
	}
	st, _ = q.Stats()
	if n := st.Count(queue.Pending); n != 1 {
		t.Fatalf("%d pending after refused messages, want 1", n)
	}

	// A negative quantity is a return; RXE-35 empty takes the formulary.
	h.Formulary = intake.Formulary{"55555-4444-22": {Schedule: "CIV"}}
	code, _, errs, out = store(rds("C11", "RX200", "2", "55555-4444-22", "-5", "mL", ""))
	if code != AA || out.Accepted != 1 {
		t.Fatalf("return: %s %v", code, errs)
	}
	var got string
	for _, r := range dlqtest.Pending(t, q) {
		if strings.Contains(string(r.Payload), "RX200") {
			got = string(r.Payload)
		}
	}
	if !strings.Contains(got, `"type":"return"`) || !strings.Contains(got, `"quantity":"5"`) || !strings.Contains(got, `"unit":"ML"`) || !strings.Contains(got, `"schedule":"CIV"`) {
		t.Fatalf("return payload %s", got)
	}
}

// An escaped delimiter in the prescription number is decoded into the
// movement, so RX|1 and RX^1 are distinct dispenses.
func TestHandleDecodesEscapes(t *testing.T) {
	h, q := newHandler(t)
	for i, rx := range []string{`RX\F\1`, `RX\S\1`, `RX\X7C\1`} {
		ack, out := h.Handle([]byte(rds("E"+string(rune('0'+i)), rx, "1", "12345-6789-01", "1", "EA", "")))
		if out.Code != AA {
			t.Fatalf("%s: %q", rx, ack)
		}
	}
	var ids []string
	for _, r := range dlqtest.Pending(t, q) {
		ids = append(ids, string(r.Payload))
	}
	if len(ids) != 2 || !strings.Contains(strings.Join(ids, ""), `"rx_ref":"RX|1"`) || !strings.Contains(strings.Join(ids, ""), `"rx_ref":"RX^1"`) {
		t.Fatalf("stored %v; want RX|1 (twice, once stored) and RX^1", ids)
	}
}

// TestHandleRefusesWhatTheFormularyRefuses answers AE, naming RXD-2 or
// RXD-5, for a bare 10-digit NDC the formulary does not resolve and for
// a unit other than the formulary's; a bare 10-digit NDC it resolves is
// stored in its canonical form, and a spelling is resent as a duplicate.
func TestHandleRefusesWhatTheFormularyRefuses(t *testing.T) {
	h, q := newHandler(t)
	h.Formulary = intake.Formulary{"00591-0540-01": {Schedule: "CII", Unit: "EA"}}
	for _, c := range []struct {
		name, ndc, unit, code, err string
	}{
		{"ambiguous", "1234567890", "EA", AE, "RXD^1^2^1^1|102^Data type error^HL70357"},
		{"other unit", "0591-0540-01", "mL", AE, "RXD^1^5^1^1|103^Table value not found^HL70357"},
		{"resolved", "0591054001", "EA", AA, ""},
		{"another spelling", "00591-0540-01", "EA", AA, ""},
	} {
		ack, out := h.Handle([]byte(rds("U-"+c.name, "RX900", "1", c.ndc, "30", c.unit, "")))
		code, _, errs := ackParts(t, ack)
		if code != c.code || c.err != "" && (len(errs) != 1 || errs[0] != c.err) {
			t.Errorf("%s: %s %v, want %s %s", c.name, code, errs, c.code, c.err)
		}
		if c.name == "another spelling" && out.Duplicates != 1 {
			t.Errorf("%s: %+v, want a duplicate", c.name, out)
		}
	}
	ps := dlqtest.Pending(t, q)
	if len(ps) != 1 || !strings.Contains(string(ps[0].Payload), `"ndc":"00591-0540-01","ndc_as_sent":"0591054001"`) {
		t.Fatalf("stored %d: %s", len(ps), ps[0].Payload)
	}
}

// TestHandleListsEveryProblem: a message with several problems is
// answered with one ERR per problem, each with the table 0357 code of its
// kind, wherever it was found: in mapping a segment, in validating the
// movement, or against the formulary.
func TestHandleListsEveryProblem(t *testing.T) {
	h, _ := newHandler(t)
	h.Formulary = intake.Formulary{"12345-6789-01": {Unit: "ML"}}
	second := func(ndc, qty, unit string) string {
		return "RXD|2|" + ndc + "^Oxycodone 5 mg tab^NDC|202603010930-0500|" + qty + "|" + unit + "||RX300\r"
	}
	long := "RXD|2|12345-6789-01^Oxycodone 5 mg tab^NDC|202603010930-0500|3|ML||RX" + strings.Repeat("9", 200) + "\r"
	for _, c := range []struct {
		name string
		msg  string
		want []string
	}{
		{"too large a quantity in a unit other than the formulary's",
			rds("C1", "RX300", "1", "12345-6789-01", "1234567890123", "EA", ""),
			[]string{"RXD^1^4^1|102", "RXD^1^5^1^1|103"}},
		{"a bad NDC in one dispense, a unit other than the formulary's in the next",
			rds("C2", "RX300", "1", "12345", "3", "ML", "") + second("12345-6789-01", "3", "EA"),
			[]string{"RXD^1^2^1^1|102", "RXD^2^5^1^1|103"}},
		{"an unknown unit in one dispense, too long a prescription number in the next",
			rds("C4", "RX300", "1", "12345-6789-01", "3", "BOX", "") + long,
			[]string{"RXD^1^5^1^1|103", "RXD^2^7^1|102", "RXD^2^7^1|102"}},
		{"no quantity in one, no NDC in the next",
			rds("C3", "RX300", "1", "12345-6789-01", "", "ML", "") + second("", "3", "ML"),
			[]string{"RXD^1^4^1|101", "RXD^2^2^1^1|101"}},
	} {
		ack, out := h.Handle([]byte(c.msg))
		code, _, errs := ackParts(t, ack)
		var got []string
		for _, e := range errs {
			got = append(got, e[:strings.LastIndex(e, "|")+4])
		}
		if code != AE || strings.Join(got, " ") != strings.Join(c.want, " ") || out.Errors != len(c.want) {
			t.Errorf("%s: %s %v (outcome %d errors), want AE %v", c.name, code, got, out.Errors, c.want)
		}
	}
}
