package audit_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// rig is a central with two stores that published movements and
// checkpoints: S0042 60 movements with checkpoints at sizes 20, 40, 50
// and 60; S0043 10 movements and a checkpoint at size 10.
type rig struct {
	ctx    context.Context
	nc     *nats.Conn
	js     jetstream.JetStream
	a, b   *ledgertest.Store
	roster *provision.Roster
	asker  ledgertest.Asker
	// records is what the archive holds.
	records uint64
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigAt(t, natstest.StartHub(t).URL())
}

// newRigAt is newRig on the central at url.
func newRigAt(t *testing.T, url string) *rig {
	t.Helper()
	ctx := testContext(t)
	nc := natstest.Connect(t, url)
	js := natstest.JetStream(t, nc)
	r := &rig{ctx: ctx, nc: nc, js: js, a: ledgertest.NewStore(t, "S0042"), b: ledgertest.NewStore(t, "S0043")}
	for _, n := range []int{20, 20, 10, 10} {
		r.a.Movements(ctx, t, js, n)
		r.a.Checkpoint(ctx, t, js)
	}
	r.b.Movements(ctx, t, js, 10)
	r.b.Checkpoint(ctx, t, js)
	r.records = 60 + 4 + 10 + 1
	r.wait(t)
	roster, err := provision.ParseRoster(strings.NewReader("# stores\n" + r.a.RosterLine() + r.b.RosterLine() + "S0044\n"))
	if err != nil {
		t.Fatal(err)
	}
	r.roster = roster
	r.asker = ledgertest.Asker{"S0042": r.a, "S0043": r.b}
	return r
}

func (r *rig) wait(t *testing.T) {
	t.Helper()
	ledgertest.WaitArchived(r.ctx, t, r.js, central.ArchiveStreamName, r.records)
}

func (r *rig) verify(t *testing.T, mod ...func(*audit.Options)) *audit.Report {
	t.Helper()
	o := audit.Options{Conn: r.nc, Roster: r.roster, Asker: r.asker}
	for _, m := range mod {
		m(&o)
	}
	rep, err := audit.Verify(r.ctx, o)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}

// failing are the findings that fail verify, as "kind store log from-to".
func failing(rep *audit.Report) []audit.Finding {
	var out []audit.Finding
	for _, f := range rep.Findings {
		if f.Kind != audit.KindUncovered {
			out = append(out, f)
		}
	}
	return out
}

func dump(rep *audit.Report) string {
	var b bytes.Buffer
	for _, f := range rep.Findings {
		fmt.Fprintf(&b, "  %s %s %s %d-%d %v: %s\n", f.Kind, f.Store, f.Log, f.From, f.To, f.Sizes, f.Detail)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}

// expect checks that verify failed with exactly the findings want
// (kind, store, from, to), in any order.
func expect(t *testing.T, rep *audit.Report, want ...audit.Finding) {
	t.Helper()
	t.Log("findings:\n" + dump(rep))
	got := failing(rep)
	if rep.OK() || len(got) != len(want) {
		t.Fatalf("ok=%v, %d failing findings, want %d:\n%s", rep.OK(), len(got), len(want), dump(rep))
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			if g.Kind == w.Kind && g.Store == w.Store && g.From == w.From && g.To == w.To && (w.Log == "" || g.Log == w.Log) {
				found = true
			}
		}
		if !found {
			t.Errorf("no finding %s %s %d-%d among:\n%s", w.Kind, w.Store, w.From, w.To, dump(rep))
		}
	}
}

func expectOK(t *testing.T, rep *audit.Report) {
	t.Helper()
	if !rep.OK() || len(rep.Findings) != 0 {
		t.Fatalf("untouched archive: ok=%v\n%s", rep.OK(), dump(rep))
	}
	if rep.Movements != 70 || rep.Checkpoints != 5 || len(rep.Logs) != 2 {
		t.Fatalf("read %d movements, %d checkpoints, %d logs", rep.Movements, rep.Checkpoints, len(rep.Logs))
	}
	for _, l := range rep.Logs {
		if l.Matched != l.Latest || l.Leaves != l.Latest || l.StoreLatest != l.Latest {
			t.Fatalf("log %+v not matched to its latest checkpoint", l)
		}
	}
}

func TestVerifyUntouched(t *testing.T) {
	r := newRig(t)
	expectOK(t, r.verify(t))
	// One store only.
	rep := r.verify(t, func(o *audit.Options) { o.Stores = []string{"S0043"} })
	if !rep.OK() || rep.Movements != 10 || len(rep.Logs) != 1 {
		t.Fatalf("--store S0043: %+v\n%s", rep, dump(rep))
	}
	// Its consumers are gone: an archive allows 32 at once.
	st, err := r.js.Stream(r.ctx, central.ArchiveStreamName)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Consumers; n != 0 {
		t.Errorf("%d consumers left on the archive", n)
	}
}

// (a) an archive recreated with one movement left out.
func TestTamperMissingMovement(t *testing.T) {
	r := newRig(t)
	expectOK(t, r.verify(t))
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		var out []ledgertest.Record
		for _, rec := range recs {
			if rec.Subject == central.ArchiveSubject("S0042") && rec.Seq() == 33 {
				continue
			}
			out = append(out, rec)
		}
		return out
	})
	rep := r.verify(t)
	expect(t, rep, audit.Finding{Kind: audit.KindMissing, Store: "S0042", Log: r.a.Log, From: 33, To: 33})
	// The store still holds the leaf: the tree goes on and every later
	// checkpoint matches.
	for _, l := range rep.Logs {
		if l.Store == "S0042" && l.Matched != 60 {
			t.Errorf("after the missing leaf, matched up to %d, want 60", l.Matched)
		}
	}
	// A store that no longer holds it: the range is named all the same.
	rep = r.verify(t, func(o *audit.Options) { o.Asker = nil })
	expect(t, rep, audit.Finding{Kind: audit.KindMissing, Store: "S0042", From: 33, To: 33})
}

// (b) one movement's payload changed and its digest header recomputed.
func TestTamperAlteredPayload(t *testing.T) {
	r := newRig(t)
	expectOK(t, r.verify(t))
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		for i := range recs {
			if recs[i].Subject == central.ArchiveSubject("S0042") && recs[i].Seq() == 27 {
				recs[i].SetPayload(bytes.Replace(recs[i].Data, []byte(`"qty":27`), []byte(`"qty":2`), 1))
			}
		}
		return recs
	})
	rep := r.verify(t)
	expect(t, rep, audit.Finding{Kind: audit.KindAltered, Store: "S0042", Log: r.a.Log, From: 27, To: 27})
	if f := failing(rep)[0]; !strings.Contains(f.Detail, "another digest") || fmt.Sprint(f.Sizes) != "[20 40]" {
		t.Errorf("finding %+v: want the changed digest, between sizes 20 and 40", f)
	}
	// The store no longer holding its leaves: the range between the
	// checkpoints is named.
	rep = r.verify(t, func(o *audit.Options) { o.Asker = nil })
	expect(t, rep, audit.Finding{Kind: audit.KindAltered, Store: "S0042", From: 21, To: 40})
}

// (c) two movements' order swapped: their sequences exchanged.
func TestTamperReordered(t *testing.T) {
	r := newRig(t)
	expectOK(t, r.verify(t))
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		var i, j int
		for k, rec := range recs {
			if rec.Subject == central.ArchiveSubject("S0042") {
				switch rec.Seq() {
				case 45:
					i = k
				case 46:
					j = k
				}
			}
		}
		recs[i].SetSeq(46)
		recs[j].SetSeq(45)
		recs[i], recs[j] = recs[j], recs[i]
		return recs
	})
	rep := r.verify(t)
	expect(t, rep,
		audit.Finding{Kind: audit.KindReordered, Store: "S0042", From: 45, To: 45},
		audit.Finding{Kind: audit.KindReordered, Store: "S0042", From: 46, To: 46})
}

// (d) the newest checkpoints removed.
func TestTamperNewestCheckpointsRemoved(t *testing.T) {
	r := newRig(t)
	expectOK(t, r.verify(t))
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		var out []ledgertest.Record
		for _, rec := range recs {
			if _, size, err := ledger.ParseCheckpointMsgID(rec.Token()); err == nil && (size == 50 || size == 60) {
				if rec.Subject == central.ArchiveSubject("S0042") {
					continue
				}
			}
			out = append(out, rec)
		}
		return out
	})
	rep := r.verify(t)
	expect(t, rep, audit.Finding{Kind: audit.KindCheckpointMissing, Store: "S0042", Log: r.a.Log})
	if f := failing(rep)[0]; fmt.Sprint(f.Sizes) != "[40 60]" {
		t.Errorf("finding %+v: want sizes 40 (archive) and 60 (store)", f)
	}
	// The leaves up to the store's checkpoint are still checked against it.
	for _, l := range rep.Logs {
		if l.Store == "S0042" && (l.Latest != 40 || l.Matched != 60) {
			t.Errorf("log %+v: want latest 40 in the archive, matched 60 by the store's checkpoint", l)
		}
	}
	// Asking no store, the removal is not seen: verify says so.
	rep = r.verify(t, func(o *audit.Options) { o.Asker = nil })
	if !rep.OK() || !strings.Contains(strings.Join(rep.Notes, "\n"), "no store was asked") {
		t.Errorf("without asking: ok=%v\n%s", rep.OK(), dump(rep))
	}
}

// (e) a store that signs a checkpoint inconsistent with an earlier one.
func TestTamperForkedByStore(t *testing.T) {
	r := newRig(t)
	expectOK(t, r.verify(t))
	r.a.Movements(r.ctx, t, r.js, 10)
	r.a.Fork(r.ctx, t, r.js, 4) // rewrites sequence 5, under its checkpoint of 60
	r.records += 11
	r.wait(t)
	rep := r.verify(t)
	expect(t, rep, audit.Finding{Kind: audit.KindForked, Store: "S0042", Log: r.a.Log})
	if f := failing(rep)[0]; fmt.Sprint(f.Sizes) != "[60 70]" {
		t.Errorf("finding %+v: want sizes 60 and 70", f)
	}
}

// (f) a forged checkpoint signed by another store's key.
func TestTamperForgedCheckpoint(t *testing.T) {
	r := newRig(t)
	expectOK(t, r.verify(t))
	// S0043's key signs a checkpoint of S0042's log at size 70: its
	// signature is valid, but not a key of S0042's. Published on S0042's
	// subject as an administrator could.
	ledgertest.PublishForged(r.ctx, t, r.js, r.b.Signer, "S0042", r.a.Log, 70)
	r.records++
	r.wait(t)
	rep := r.verify(t)
	expect(t, rep, audit.Finding{Kind: audit.KindUnverifiedCheckpoint, Store: "S0042", Log: r.a.Log})
	if f := failing(rep)[0]; fmt.Sprint(f.Sizes) != "[70]" {
		t.Errorf("finding %+v: want size 70", f)
	}
}

// (g) a store that signs, late, a checkpoint of a size its tree passed
// long ago, with another root: compared with the root matched there, it
// is a fork, though its proof starts nowhere the archive knows.
func TestTamperLateForkedCheckpoint(t *testing.T) {
	r := newRig(t)
	r.a.PublishRoot(r.ctx, t, r.js, 20, ledger.Hash{1}, 0)
	r.records++
	r.wait(t)
	rep := r.verify(t)
	expect(t, rep, audit.Finding{Kind: audit.KindForked, Store: "S0042", Log: r.a.Log})
	if f := failing(rep)[0]; fmt.Sprint(f.Sizes) != "[20]" {
		t.Errorf("finding %+v: want size 20", f)
	}
}
