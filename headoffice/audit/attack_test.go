package audit_test

import (
	"crypto/rand"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/testkit/ledgertest"
)

func TestParseRoster(t *testing.T) {
	_, v42, _ := ledger.GenerateKey(rand.Reader, "S0042")
	_, v42b, _ := ledger.GenerateKey(rand.Reader, "S0042")
	_, v43, _ := ledger.GenerateKey(rand.Reader, "S0043")
	r, err := audit.ParseRoster(strings.NewReader("# comment\n\nS0042 " + v42 + "\nS0042 " + v42b + "\nS0042 " + v42 + "\n  S0043\t" + v43 + "\nS0044\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r["S0042"]) != 2 || len(r["S0043"]) != 1 || len(r["S0044"]) != 0 {
		t.Fatalf("roster %v", r)
	}
	_, other, _ := note.GenerateKey(rand.Reader, "someone")
	for name, text := range map[string]string{
		"another store's key": "S0042 " + v43 + "\n",
		"not a key":           "S0042 rxedge-store-S0042+00000000+AAAA\n",
		"bad store id":        "S 42\n",
		"reserved id":         "fleet\n",
		"three fields":        "S0042 " + v42 + " extra\n",
		"a key of no store":   "S0042 " + other + "\n",
		"a line too long":     "S0042 " + strings.Repeat("x", audit.MaxRosterLine) + "\n",
	} {
		_, err := audit.ParseRoster(strings.NewReader(text))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		// Errors name the line, never its content.
		if strings.Contains(err.Error(), "AAAA") || strings.Contains(err.Error(), "xxxx") {
			t.Errorf("%s: the error repeats the line: %v", name, err)
		}
	}
}

// What a store's credentials can publish on its own subjects: garbage
// under a checkpoint id, a movement with no usable headers, a checkpoint
// whose id names another size. Each is a finding; nothing else changes.
func TestVerifyRefusesGarbage(t *testing.T) {
	r := newRig(t)
	pub := func(id string, data []byte, seq string) {
		t.Helper()
		subj := ledgertest.Key("S0042", 1000+int(r.records))
		if ledger.IsCheckpointToken(id) {
			subj = id
		}
		m := nats.NewMsg(central.Subject("S0042", subj))
		m.Header.Set(central.HeaderMsgID, id)
		m.Header.Set(central.HeaderStore, "S0042")
		if seq != "" {
			m.Header.Set(central.HeaderSeq, seq)
		}
		m.Data = data
		if _, err := r.js.PublishMsg(r.ctx, m); err != nil {
			t.Fatal(err)
		}
		r.records++
	}
	pub(ledger.CheckpointToken(r.a.Log, 99), []byte(`{"note":`), "")
	pub(ledger.CheckpointToken(r.a.Log, 98), []byte(strings.Repeat("x", ledger.MaxMessage+1)), "")
	pub("cp-nonsense", []byte(`{}`), "")
	pub(ledgertest.Key("S0042", 999), []byte(`{}`), "x")
	// A genuine checkpoint message republished under another size's id.
	r.a.Movements(r.ctx, t, r.js, 1)
	body, _ := r.a.Checkpoint(r.ctx, t, r.js).Marshal()
	r.records += 2
	pub(ledger.CheckpointToken(r.a.Log, 62), body, "")
	r.wait(t)
	rep := r.verify(t)
	if rep.Counts[audit.KindAltered] != 5 || len(failing(rep)) != 5 {
		t.Fatalf("want 5 altered:\n%s", dump(rep))
	}
	for _, l := range rep.Logs {
		if l.Store == "S0042" && l.Matched != 61 {
			t.Errorf("the genuine log no longer matches: %+v", l)
		}
	}
}

// An archive rewritten with unsigned checkpoint records of a log before
// and after its genuine ones, so that the first read cannot learn where
// the log starts: verify fails rather than skip the log.
func TestVerifyStuffedCheckpoints(t *testing.T) {
	r := newRig(t)
	junk := func(size int64) ledgertest.Record {
		h := nats.Header{}
		h.Set(central.HeaderMsgID, ledger.CheckpointToken(r.a.Log, size))
		return ledgertest.Record{Subject: central.ArchiveSubject("S0042"), Header: h, Data: []byte(`{"note":"x"}`)}
	}
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		var out []ledgertest.Record
		for i := 0; i < 20; i++ {
			out = append(out, junk(int64(100+i)))
		}
		out = append(out, recs...)
		for i := 0; i < 20; i++ {
			out = append(out, junk(int64(200+i)))
		}
		return out
	})
	// The store's answer gives the log's start: the log is checked whole.
	rep := r.verify(t)
	if rep.OK() || rep.Counts[audit.KindBadSignature] != 40 || len(failing(rep)) != 40 {
		t.Fatalf("stuffed archive: %s", dump(rep))
	}
	for _, l := range rep.Logs {
		if l.Store == "S0042" && l.Matched != 60 {
			t.Errorf("log %+v not checked", l)
		}
	}
	// Asking no store: the log cannot be checked, and that fails.
	rep = r.verify(t, func(o *audit.Options) { o.Asker = nil })
	if rep.OK() || rep.Counts[audit.KindAltered] != 1 || !strings.Contains(dump(rep), "whose start the first read did not learn") {
		t.Fatalf("stuffed archive, no store asked: %s", dump(rep))
	}
}
