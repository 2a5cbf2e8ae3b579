package audit_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/testkit/ledgertest"
)

func TestProve(t *testing.T) {
	r := newRig(t)
	key := ledgertest.Key("S0042", 32) // sequence 33
	p, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: key, Roster: r.roster})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ledger.CheckProof(p, r.a.VKey, "")
	if err != nil || res.Leaf.Seq != 33 || res.Checkpoint.Size != 60 || p.Payload != string(ledgertest.Payload("S0042", 32)) {
		t.Fatalf("proof of sequence 33: %+v %v", res, err)
	}
	// Another store's key does not check it.
	if _, err := ledger.CheckProof(p, r.b.VKey, ""); err == nil {
		t.Error("S0043's key checked S0042's proof")
	}
	// Countersigned: the proof carries the witness's signature.
	w, _, _, wkey := newWitness(t, r, filepath.Join(t.TempDir(), "w.json"))
	if _, err := w.Once(r.ctx); err != nil {
		t.Fatal(err)
	}
	p, err = audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: strings.ToUpper(key), Store: "S0042", Roster: r.roster})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ledger.CheckProof(p, r.a.VKey, wkey); err != nil || !res.Witnessed {
		t.Fatalf("countersigned proof: %+v %v", res, err)
	}
	// A movement no checkpoint covers yet, and one not archived.
	r.a.Movements(r.ctx, t, r.js, 1)
	r.records++
	r.wait(t)
	if _, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: ledgertest.Key("S0042", 60), Roster: r.roster}); !errors.Is(err, audit.ErrNotCovered) {
		t.Errorf("uncovered movement: %v", err)
	}
	if _, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: ledgertest.Key("S0042", 99), Roster: r.roster}); !errors.Is(err, audit.ErrNotFound) {
		t.Errorf("unknown movement: %v", err)
	}
	if _, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: "not-a-key", Roster: r.roster}); err == nil {
		t.Error("a malformed key accepted")
	}
}
