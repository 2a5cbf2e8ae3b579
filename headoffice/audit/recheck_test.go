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
// keeps the first tree it verified past them as the log's anchor; a log
// verified again after a rewrite starts from it: a change below it is the
// rewrite's finding alone, one above it is named. A sweep over leaves the
// retention keeps for longer than AnchorLead leaves the anchor where it
// is (it moved to the first root matched, however fresh, before).
func TestRecheckMovesTheAnchor(t *testing.T) {
	r := newRig(t)
	const maxAge = time.Hour
	setMaxAge(t, r, maxAge)
	state := filepath.Join(t.TempDir(), "verify.state")
	expectOK(t, r.pass(t, state, noRecheck))
	// As in production (30 days of a 761-day max_age), the lead is a small
	// part of the max age: every record of the sweep is fresh.
	fresh := func(o *audit.Options) { o.AnchorLead = 2 * time.Minute }
	if rep := r.pass(t, state, fresh); !rep.OK() || rep.Recheck == nil || !rep.Recheck.Ended {
		t.Fatalf("the sweep did not end in one pass: %+v\n%s", rep.Recheck, dump(rep))
	}
	if n := anchors(t, state, "S0042"); n != 0 {
		t.Fatalf("a sweep over fresh leaves gave S0042's log an anchor")
	}
	// The edge between S0042's first 20 movements (archive records 1-20)
	// and the next (22-41, after its checkpoint at 21): a clock held
	// where the first are within AnchorLead of the max_age and the next
	// are not.
	mid := archivedAt(t, r, 20).Add(archivedAt(t, r, 22).Sub(archivedAt(t, r, 20)) / 2)
	now := time.Now()
	rep := r.pass(t, state, func(o *audit.Options) {
		o.Now = func() time.Time { return now }
		o.AnchorLead = maxAge - now.Sub(mid)
	})
	if !rep.OK() || rep.Recheck == nil || !rep.Recheck.Ended {
		t.Fatalf("the second sweep did not end in one pass: %+v\n%s", rep.Recheck, dump(rep))
	}
	if n := anchors(t, state, "S0042"); n != 1 {
		t.Fatalf("S0042's log has no anchor after the sweep over its aging leaves")
	}
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		i := seqOf(recs, "S0042", 45)
		recs = append(recs[:i:i], recs[i+1:]...)
		j := seqOf(recs, "S0042", 5)
		return append(recs[:j:j], recs[j+1:]...)
	})
	rep = r.pass(t, state, noRecheck)
	expect(t, rep, audit.Finding{Kind: audit.KindArchiveRewritten}, audit.Finding{Kind: audit.KindMissing, Store: "S0042", From: 45, To: 45})
}

// anchors counts the logs of store that have an anchor in the state.
func anchors(t *testing.T, state, store string) int {
	t.Helper()
	var n int
	editVerifyState(t, state, true, func(s map[string]any) {
		for _, l := range s["stores"].(map[string]any)[store].(map[string]any)["logs"].([]any) {
			if l.(map[string]any)["anchor"] != nil {
				n++
			}
		}
	})
	return n
}

// archivedAt is when the archive stored its record at seq.
func archivedAt(t *testing.T, r *rig, seq uint64) time.Time {
	t.Helper()
	st, err := r.js.Stream(r.ctx, central.ArchiveStreamName)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(r.ctx, seq)
	if err != nil {
		t.Fatalf("archive record %d: %v", seq, err)
	}
	return m.Time
}
