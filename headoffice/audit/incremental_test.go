package audit_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/testkit/ledgertest"
)

// pass runs one verification pass with the state in file.
func (r *rig) pass(t *testing.T, file string, mod ...func(*audit.Options)) *audit.Report {
	t.Helper()
	return r.verify(t, append([]func(*audit.Options){func(o *audit.Options) { o.State = audit.FileState(file) }}, mod...)...)
}

// noRecheck leaves the rolling re-check out of a pass.
func noRecheck(o *audit.Options) { o.RecheckBudget = -1 }

func logOf(t *testing.T, rep *audit.Report, store string) audit.LogReport {
	t.Helper()
	for _, l := range rep.Logs {
		if l.Store == store {
			return l
		}
	}
	t.Fatalf("no log of %s in the report:\n%s", store, dump(rep))
	return audit.LogReport{}
}

// A pass with a state reads what the archive gained since the last pass,
// and only that; the logs stand as every pass so far established them.
func TestIncrementalReadsOnlyWhatIsNew(t *testing.T) {
	r := newRig(t)
	state := filepath.Join(t.TempDir(), "verify.state")
	rep := r.pass(t, state, noRecheck)
	expectOK(t, rep)
	if rep.Incremental || rep.Records != r.records {
		t.Fatalf("first pass: incremental %v, %d records read, want the whole archive (%d)", rep.Incremental, rep.Records, r.records)
	}
	rep = r.pass(t, state, noRecheck)
	if !rep.OK() || !rep.Incremental || rep.Records != 0 || rep.Movements != 0 || len(failing(rep)) != 0 {
		t.Fatalf("nothing new: incremental %v, %d records read\n%s", rep.Incremental, rep.Records, dump(rep))
	}
	if l := logOf(t, rep, "S0042"); l.Matched != 60 || l.Latest != 60 || l.Leaves != 60 || l.Checkpoints != 4 {
		t.Errorf("S0042's log after a pass with nothing new: %+v", l)
	}
	r.a.Movements(r.ctx, t, r.js, 10)
	r.a.Checkpoint(r.ctx, t, r.js)
	r.b.Movements(r.ctx, t, r.js, 3) // not signed yet
	r.records += 14
	r.wait(t)
	rep = r.pass(t, state, noRecheck)
	if !rep.OK() || rep.Records != 14 || rep.Movements != 13 || rep.Checkpoints != 1 {
		t.Fatalf("14 new records: read %d (%d movements, %d checkpoints)\n%s", rep.Records, rep.Movements, rep.Checkpoints, dump(rep))
	}
	if l := logOf(t, rep, "S0042"); l.Matched != 70 || l.Latest != 70 || l.Checkpoints != 5 {
		t.Errorf("S0042's log: %+v, want matched at 70 after 5 checkpoints", l)
	}
	if len(rep.Positions) != 1 || rep.Positions[0].From != r.records-13 || rep.Positions[0].To != r.records || rep.Positions[0].Records != 14 {
		t.Errorf("positions %+v, want the archive read from %d to %d", rep.Positions, r.records-13, r.records)
	}
	// S0043's three new movements are not covered yet; its next
	// checkpoint covers them, and they were not read twice.
	if l := logOf(t, rep, "S0043"); l.Leaves != 13 || l.Matched != 10 {
		t.Errorf("S0043's log: %+v, want 13 leaves, matched at 10", l)
	}
	r.b.Checkpoint(r.ctx, t, r.js)
	r.records++
	r.wait(t)
	rep = r.pass(t, state, noRecheck)
	if !rep.OK() || rep.Records != 1 || logOf(t, rep, "S0043").Matched != 13 {
		t.Fatalf("S0043's checkpoint of its three pending movements: %d records read, log %+v\n%s", rep.Records, logOf(t, rep, "S0043"), dump(rep))
	}
}

// rewrite is an insider's rewrite of the archive, by central's
// administrator, and the findings a pass must then make.
type rewrite struct {
	name string
	edit func(r *rig, recs []ledgertest.Record) []ledgertest.Record
	want []audit.Finding
}

func seqOf(recs []ledgertest.Record, store string, seq uint64) int {
	for i, rec := range recs {
		if rec.Subject == central.ArchiveSubject(store) && rec.Seq() == seq {
			return i
		}
	}
	return -1
}

var rewrites = []rewrite{
	{name: "a movement dropped", edit: func(r *rig, recs []ledgertest.Record) []ledgertest.Record {
		i := seqOf(recs, "S0042", 33)
		return append(recs[:i:i], recs[i+1:]...)
	}, want: []audit.Finding{{Kind: audit.KindMissing, Store: "S0042", From: 33, To: 33}}},
	{name: "a movement altered, its digest recomputed", edit: func(r *rig, recs []ledgertest.Record) []ledgertest.Record {
		i := seqOf(recs, "S0042", 27)
		recs[i].SetPayload(bytes.Replace(recs[i].Data, []byte(`"qty":27`), []byte(`"qty":2`), 1))
		return recs
	}, want: []audit.Finding{{Kind: audit.KindAltered, Store: "S0042", From: 27, To: 27}}},
	{name: "two movements trading sequences", edit: func(r *rig, recs []ledgertest.Record) []ledgertest.Record {
		i, j := seqOf(recs, "S0042", 45), seqOf(recs, "S0042", 46)
		recs[i].SetSeq(46)
		recs[j].SetSeq(45)
		recs[i], recs[j] = recs[j], recs[i]
		return recs
	}, want: []audit.Finding{{Kind: audit.KindReordered, Store: "S0042", From: 45, To: 45}, {Kind: audit.KindReordered, Store: "S0042", From: 46, To: 46}}},
	{name: "deleted and recreated as it was", edit: func(r *rig, recs []ledgertest.Record) []ledgertest.Record { return recs }},
	{name: "deleted and recreated empty", edit: func(r *rig, recs []ledgertest.Record) []ledgertest.Record { return nil },
		want: []audit.Finding{
			{Kind: audit.KindMissing, Store: "S0042", From: 1, To: 60}, {Kind: audit.KindCheckpointMissing, Store: "S0042"},
			{Kind: audit.KindMissing, Store: "S0043", From: 1, To: 10}, {Kind: audit.KindCheckpointMissing, Store: "S0043"},
		}},
}

// Central's administrator rewrites an archive that a pass verified: it
// deletes the stream and recreates it with a movement dropped, one
// altered (its digest recomputed), two trading sequences, or nothing
// changed at all, or leaves it empty. The next pass finds the archive
// recreated, verifies every log again against what it had verified, and
// names what changed. A second pass after it reads only what is new.
func TestIncrementalFindsRewrites(t *testing.T) {
	t.Parallel()
	for _, rw := range rewrites {
		t.Run(rw.name, func(t *testing.T) {
			r := newRig(t)
			state := filepath.Join(t.TempDir(), "verify.state")
			expectOK(t, r.pass(t, state, noRecheck))
			ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record { return rw.edit(r, recs) })
			rep := r.pass(t, state, noRecheck)
			want := append([]audit.Finding{{Kind: audit.KindArchiveRewritten}}, rw.want...)
			expect(t, rep, want...)
			if f := failing(rep)[0]; f.Stream != central.ArchiveStreamName || !strings.Contains(f.Detail, "created again") {
				t.Errorf("finding %+v: want the archive named, recreated", f)
			}
			rep = r.pass(t, state, noRecheck)
			if rep.Records != 0 || rep.Counts[audit.KindArchiveRewritten] != 0 {
				t.Errorf("the pass after: %d records read, %d rewrites\n%s", rep.Records, rep.Counts[audit.KindArchiveRewritten], dump(rep))
			}
		})
	}
}

// allowDeletes recreates the rig's archive as an administrator could have
// provisioned it: deletes and purges allowed, and a duplicate window short
// enough for a deleted record to be published again under its id.
func allowDeletes(t *testing.T, r *rig) {
	t.Helper()
	ledgertest.RewriteArchiveConfig(r.ctx, t, r.js, central.ArchiveStreamName, func(c *jetstream.StreamConfig) {
		c.DenyDelete, c.DenyPurge, c.Duplicates = false, false, 200*time.Millisecond
	}, func(recs []ledgertest.Record) []ledgertest.Record { return recs })
}

// In an archive that allows deletes, the administrator deletes records a
// pass verified and publishes altered copies at its end: a movement
// dropped, one altered with its digest recomputed, two trading sequences.
// The archive's count of deleted records gives it away at the next pass,
// which verifies the logs again and names what changed.
func TestIncrementalFindsDeletes(t *testing.T) {
	t.Parallel()
	find := func(recs []ledgertest.Record, seq uint64) ledgertest.Record { return recs[seqOf(recs, "S0042", seq)] }
	cases := []struct {
		name string
		edit func([]ledgertest.Record) ([]uint64, []ledgertest.Record)
		want []audit.Finding
	}{
		{"a movement dropped", func(recs []ledgertest.Record) ([]uint64, []ledgertest.Record) {
			return []uint64{find(recs, 33).StreamSeq}, nil
		}, []audit.Finding{{Kind: audit.KindMissing, Store: "S0042", From: 33, To: 33}}},
		{"a movement altered, its digest recomputed", func(recs []ledgertest.Record) ([]uint64, []ledgertest.Record) {
			rec := find(recs, 27)
			alt := rec
			alt.SetPayload(bytes.Replace(rec.Data, []byte(`"qty":27`), []byte(`"qty":2`), 1))
			return []uint64{rec.StreamSeq}, []ledgertest.Record{alt}
		}, []audit.Finding{{Kind: audit.KindAltered, Store: "S0042", From: 27, To: 27}}},
		{"two movements trading sequences", func(recs []ledgertest.Record) ([]uint64, []ledgertest.Record) {
			a, b := find(recs, 45), find(recs, 46)
			a2, b2 := a, b
			a2.SetSeq(46)
			b2.SetSeq(45)
			return []uint64{a.StreamSeq, b.StreamSeq}, []ledgertest.Record{b2, a2}
		}, []audit.Finding{{Kind: audit.KindReordered, Store: "S0042", From: 45, To: 45}, {Kind: audit.KindReordered, Store: "S0042", From: 46, To: 46}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			allowDeletes(t, r)
			state := filepath.Join(t.TempDir(), "verify.state")
			expectOK(t, r.pass(t, state, noRecheck))
			ledgertest.EditArchive(r.ctx, t, r.js, central.ArchiveStreamName, tc.edit)
			rep := r.pass(t, state, noRecheck)
			expect(t, rep, append([]audit.Finding{{Kind: audit.KindArchiveRewritten}}, tc.want...)...)
			if f := failing(rep)[0]; !strings.Contains(f.Detail, "were deleted") {
				t.Errorf("finding %+v: want the deletes named", f)
			}
		})
	}
}

// A store's next data file signs with a new key that is not in the roster
// yet: its checkpoints are counted as unverified and chose nothing. Once
// the key is in the roster, the next pass reads that store's records
// again, alone, and verifies its new log.
func TestIncrementalRosterKeyAdded(t *testing.T) {
	r := newRig(t)
	state := filepath.Join(t.TempDir(), "verify.state")
	expectOK(t, r.pass(t, state, noRecheck))
	next := ledgertest.NewStore(t, "S0042")
	next.First, next.Index = 61, 60
	next.Movements(r.ctx, t, r.js, 5)
	next.Checkpoint(r.ctx, t, r.js)
	r.records += 6
	r.wait(t)
	r.asker["S0042"] = next
	rep := r.pass(t, state, noRecheck)
	expect(t, rep, audit.Finding{Kind: audit.KindUnverifiedCheckpoint, Store: "S0042"}, audit.Finding{Kind: audit.KindBadSignature, Store: "S0042"})
	roster, err := provision.ParseRoster(strings.NewReader(r.a.RosterLine() + next.RosterLine() + r.b.RosterLine() + "S0044\n"))
	if err != nil {
		t.Fatal(err)
	}
	rep = r.pass(t, state, noRecheck, func(o *audit.Options) { o.Roster = roster })
	if !rep.OK() || rep.Records != 0 || rep.Reread != 70 || !strings.Contains(strings.Join(rep.Notes, "\n"), "store S0042 is read again: its keys in the roster changed") {
		t.Fatalf("the new key in the roster: %d records read, %d read again\n%s", rep.Records, rep.Reread, dump(rep))
	}
	var logs []audit.LogReport
	for _, l := range rep.Logs {
		if l.Store == "S0042" {
			logs = append(logs, l)
		}
	}
	if len(logs) != 2 || logs[0].Matched != 60 || logs[1].First != 61 || logs[1].Matched != 5 || logs[1].StoreLatest != 5 {
		t.Fatalf("S0042's logs: %+v, want its first matched at 60 and its next, from 61, at 5", logs)
	}
}

// An archive a pass verified that is then deleted is a finding once: the
// pass after that one reads only what is new.
func TestIncrementalArchiveDeleted(t *testing.T) {
	r := newRig(t)
	const other = "RX_ARCHIVE_3"
	if _, err := r.js.CreateStream(r.ctx, jetstream.StreamConfig{Name: other, Subjects: []string{"rx.test.other"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "verify.state")
	expectOK(t, r.pass(t, state, noRecheck))
	if err := r.js.DeleteStream(r.ctx, other); err != nil {
		t.Fatal(err)
	}
	rep := r.pass(t, state, noRecheck)
	expect(t, rep, audit.Finding{Kind: audit.KindArchiveRewritten})
	if f := failing(rep)[0]; f.Stream != other || !strings.Contains(f.Detail, "no longer exists") {
		t.Errorf("finding %+v: want %s named as gone", f, other)
	}
	rep = r.pass(t, state, noRecheck)
	if !rep.OK() || rep.Records != 0 || len(failing(rep)) != 0 {
		t.Fatalf("the pass after: %d records read\n%s", rep.Records, dump(rep))
	}
}
