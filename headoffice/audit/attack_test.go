package audit_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/testkit/ledgertest"
)

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
