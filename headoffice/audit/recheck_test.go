package audit_test

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/testkit/ledgertest"
)

// A record changed where it lies, so that the archive's identity, counts
// and last record all read as before (an edit of the server's files,
// simulated here by a rewrite whose new identity is carried into the
// state), is found by the rolling re-check: each pass re-reads at most
// its budget of records, sweeping the archive in order, and the sweep
// names the change once it has read the archive up to what was verified.
func TestRecheckFindsWhatTheArchiveHides(t *testing.T) {
	r := newRig(t)
	state := filepath.Join(t.TempDir(), "verify.state")
	expectOK(t, r.pass(t, state, noRecheck))
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		i := seqOf(recs, "S0042", 27)
		recs[i].SetPayload(bytes.Replace(recs[i].Data, []byte(`"qty":27`), []byte(`"qty":2`), 1))
		return recs
	})
	st, err := r.js.Stream(r.ctx, central.ArchiveStreamName)
	if err != nil {
		t.Fatal(err)
	}
	created := st.CachedInfo().Created.Format(time.RFC3339Nano)
	editVerifyState(t, state, true, func(s map[string]any) {
		a := s["streams"].(map[string]any)[central.ArchiveStreamName].(map[string]any)
		a["created"] = created
		delete(a, "print_seq")
		delete(a, "print")
	})
	const budget = 30
	found := 0
	for pass := 1; pass <= 4 && found == 0; pass++ {
		rep := r.pass(t, state, func(o *audit.Options) { o.RecheckBudget = budget })
		if rep.Records != 0 || rep.Counts[audit.KindArchiveRewritten] != 0 || rep.Rechecked > budget || rep.Rechecked == 0 {
			t.Fatalf("pass %d: %d records read, %d re-read (budget %d)\n%s", pass, rep.Records, rep.Rechecked, budget, dump(rep))
		}
		t.Logf("pass %d re-read %d records (the sweep: %+v)", pass, rep.Rechecked, *rep.Recheck)
		for _, f := range failing(rep) {
			if f.Kind == audit.KindAltered && f.Store == "S0042" && f.From == 27 && f.To == 27 {
				found = pass
			}
		}
		if found == 0 && !rep.OK() {
			t.Fatalf("pass %d: findings before the re-check named the change:\n%s", pass, dump(rep))
		}
	}
	// The archive's 75 records, 30 a pass: the sweep ends in the third.
	if found != 3 {
		t.Fatalf("the altered movement was named in pass %d, want the third (the archive's 75 records at 30 a pass)", found)
	}
}

// A sweep that passes leaves within AnchorLead of the archive's max_age
// keeps the tree it verified there as the log's anchor; a log verified
// again after a rewrite starts from it: a change below it is the
// rewrite's finding alone, one above it is named.
func TestRecheckMovesTheAnchor(t *testing.T) {
	r := newRig(t)
	setMaxAge(t, r, time.Hour)
	state := filepath.Join(t.TempDir(), "verify.state")
	expectOK(t, r.pass(t, state, noRecheck))
	// An AnchorLead of a nanosecond puts every record past the edge: the
	// first root the sweep matches, S0042's at size 20, is the anchor.
	rep := r.pass(t, state, func(o *audit.Options) { o.AnchorLead = time.Nanosecond })
	if !rep.OK() || rep.Recheck == nil || !rep.Recheck.Ended {
		t.Fatalf("the sweep did not end in one pass: %+v\n%s", rep.Recheck, dump(rep))
	}
	var anchored int
	editVerifyState(t, state, true, func(s map[string]any) {
		for _, l := range s["stores"].(map[string]any)["S0042"].(map[string]any)["logs"].([]any) {
			if l.(map[string]any)["anchor"] != nil {
				anchored++
			}
		}
	})
	if anchored != 1 {
		t.Fatalf("S0042's log has no anchor after the sweep")
	}
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		i := seqOf(recs, "S0042", 33)
		recs = append(recs[:i:i], recs[i+1:]...)
		j := seqOf(recs, "S0042", 5)
		return append(recs[:j:j], recs[j+1:]...)
	})
	rep = r.pass(t, state, noRecheck)
	expect(t, rep, audit.Finding{Kind: audit.KindArchiveRewritten}, audit.Finding{Kind: audit.KindMissing, Store: "S0042", From: 33, To: 33})
}
