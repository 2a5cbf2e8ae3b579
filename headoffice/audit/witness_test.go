package audit_test

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/testkit/ledgertest"
)

func newWitness(t *testing.T, r *rig, state string) (*audit.Witness, note.Signer, note.Verifier, string) {
	t.Helper()
	skey, vkey, err := audit.GenerateWitnessKey(rand.Reader, "")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	v, _ := note.NewVerifier(vkey)
	return openWitness(t, r, state, signer), signer, v, vkey
}

// openWitness starts a witness on its state file, as after a restart.
func openWitness(t *testing.T, r *rig, state string, signer note.Signer) *audit.Witness {
	t.Helper()
	w, err := audit.NewWitness(r.ctx, audit.WitnessOptions{Conn: r.nc, Roster: r.roster, Signer: signer, StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func witnessMsgs(t *testing.T, r *rig) uint64 {
	t.Helper()
	st, err := r.js.Stream(r.ctx, audit.WitnessStreamName)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

func TestWitnessCountersignsAndVerifyChecksIt(t *testing.T) {
	r := newRig(t)
	state := filepath.Join(t.TempDir(), "witness.json")
	w, signer, wv, _ := newWitness(t, r, state)
	run, err := w.Once(r.ctx)
	if err != nil || run.Countersigned != 5 || len(run.Refused) != 0 {
		t.Fatalf("first pass: %+v %v", run, err)
	}
	withWitness := func(o *audit.Options) { o.Witness = wv }
	rep := r.verify(t, withWitness)
	expectOK(t, rep)
	for _, l := range rep.Logs {
		if l.Witnessed != l.Latest {
			t.Errorf("log %+v: witnessed %d, latest %d", l, l.Witnessed, l.Latest)
		}
	}
	// Nothing new: nothing countersigned again.
	if run, err := w.Once(r.ctx); err != nil || run.Countersigned != 0 || run.Read != 0 {
		t.Fatalf("idle pass: %+v %v", run, err)
	}
	// A crash between publishing a countersignature and saving the state:
	// the state file as it was before the pass. The witness countersigns
	// the same checkpoints again (the same bytes), and all still holds.
	before, _ := os.ReadFile(state)
	r.a.Movements(r.ctx, t, r.js, 5)
	r.a.Checkpoint(r.ctx, t, r.js)
	r.records += 6
	r.wait(t)
	if run, err := w.Once(r.ctx); err != nil || run.Countersigned != 1 {
		t.Fatalf("pass after new checkpoint: %+v %v", run, err)
	}
	if err := os.WriteFile(state, before, 0o600); err != nil {
		t.Fatal(err)
	}
	w2 := openWitness(t, r, state, signer)
	if run, err := w2.Once(r.ctx); err != nil || run.Countersigned != 1 {
		t.Fatalf("pass after the lost save: %+v %v", run, err)
	}
	if n := witnessMsgs(t, r); n != 6 {
		t.Errorf("witness stream holds %d checkpoints, want 6 (the repeat deduplicated)", n)
	}
	rep = r.verify(t, withWitness)
	if !rep.OK() {
		t.Fatalf("after the repeat: %s", dump(rep))
	}
	// A witness key that did not countersign: every countersignature fails.
	_, other, _ := audit.GenerateWitnessKey(rand.Reader, "")
	ov, _ := note.NewVerifier(other)
	rep = r.verify(t, func(o *audit.Options) { o.Witness = ov })
	if rep.OK() || rep.Counts[audit.KindBadSignature] != 6 {
		t.Errorf("another witness key: %s", dump(rep))
	}
}

func TestWitnessRefusesForkAndForgery(t *testing.T) {
	r := newRig(t)
	w, _, wv, _ := newWitness(t, r, filepath.Join(t.TempDir(), "witness.json"))
	if _, err := w.Once(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.a.Movements(r.ctx, t, r.js, 10)
	r.a.Fork(r.ctx, t, r.js, 4)
	r.records += 11
	r.wait(t)
	run, err := w.Once(r.ctx)
	if err != nil || run.Countersigned != 0 || run.Refused[audit.RefusedForked] != 1 {
		t.Fatalf("fork: %+v %v", run, err)
	}
	rep := r.verify(t, func(o *audit.Options) { o.Witness = wv })
	expect(t, rep, audit.Finding{Kind: audit.KindForked, Store: "S0042", Log: r.a.Log})
	for _, l := range rep.Logs {
		if l.Store == "S0042" && l.Witnessed != 60 {
			t.Errorf("witnessed up to %d, want 60", l.Witnessed)
		}
	}
	// Another store's key over S0043's log: refused.
	ledgertest.PublishForged(r.ctx, t, r.js, r.a.Signer, "S0043", r.b.Log, 11)
	r.records++
	r.wait(t)
	run, err = w.Once(r.ctx)
	if err != nil || run.Countersigned != 0 || run.Refused[audit.RefusedBadSignature] != 1 {
		t.Fatalf("forgery: %+v %v", run, err)
	}
}
