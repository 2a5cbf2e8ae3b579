package audit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/testkit/ledgertest"
)

// publishInsider publishes, as anyone who may write on store's subjects
// can, a consistent movement (its digest is its payload's) under a
// sequence of the insider's choosing, and returns its key.
func publishInsider(t *testing.T, r *rig, store string, seq uint64, name string) string {
	t.Helper()
	payload := []byte(fmt.Sprintf(`{"movement_id":%q,"type":"receive","quantity":5000,"schedule":"CII"}`, name))
	sum := sha256.Sum256(payload)
	k := sha256.Sum256([]byte(name))
	key := hex.EncodeToString(k[:16])
	m := central.Message{Store: store, Key: key, Digest: hex.EncodeToString(sum[:]), Seq: seq, EnqueuedAt: time.Now(), Payload: payload}
	if _, err := r.js.PublishMsg(r.ctx, m.Msg()); err != nil {
		t.Fatalf("the insider publishes sequence %d: %v", seq, err)
	}
	r.records++
	return key
}

// TestVerifyForgedRepeatIsAltered: an insider files a consistent movement
// under a sequence the store already gave, long after the checkpoints
// covering it matched (its leaf folded into the tree). It is an altered
// record, not a repeat; a true repeat (the same record archived again, a
// resend after the dedupe horizon) stays a counted repeat. And prove
// refuses the forged movement, saying why, rather than writing a proof
// verify-proof rejects.
func TestVerifyForgedRepeatIsAltered(t *testing.T) {
	r := newRig(t)
	forged := publishInsider(t, r, "S0042", 10, "forged-repeat-10")
	r.wait(t)
	// A true repeat: the store's record of sequence 11 archived again, as
	// a resend after the dedupe horizon is (a short duplicate window
	// stands for the horizon).
	short := func(c *jetstream.StreamConfig) { c.Duplicates = 100 * time.Millisecond }
	ledgertest.RewriteArchiveConfig(r.ctx, t, r.js, central.ArchiveStreamName, short, func(recs []ledgertest.Record) []ledgertest.Record {
		for _, rec := range recs {
			if rec.Subject == central.ArchiveSubject("S0042") && rec.Token() == "" && rec.Seq() == 11 {
				return append(recs, rec)
			}
		}
		t.Fatal("the archive holds no sequence 11 of S0042")
		return nil
	})
	r.records++
	r.wait(t)
	for _, mode := range []struct {
		name string
		mod  func(*audit.Options)
	}{{"asking the stores", func(*audit.Options) {}}, {"not asking", func(o *audit.Options) { o.Asker = nil }}, {"leaves folded at once", func(o *audit.Options) { o.MaxBuffered = 4 }}} {
		t.Run(mode.name, func(t *testing.T) {
			rep := r.verify(t, mode.mod)
			expect(t, rep, audit.Finding{Kind: audit.KindAltered, Store: "S0042", From: 10, To: 10})
			var repeats uint64
			for _, l := range rep.Logs {
				if l.Store == "S0042" {
					repeats += l.Repeats
				}
			}
			if repeats != 2 {
				t.Errorf("S0042's repeats = %d, want 2 (the forgery and the true repeat)", repeats)
			}
		})
	}
	_, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: forged, Store: "S0042", Roster: r.roster, NoWitness: true})
	if !errors.Is(err, audit.ErrNotInLog) || !strings.Contains(err.Error(), "sequence 10") {
		t.Fatalf("prove of the forged movement: %v; want audit.ErrNotInLog naming sequence 10", err)
	}
	p, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: ledgertest.Key("S0042", 9), Store: "S0042", Roster: r.roster, NoWitness: true})
	if err != nil {
		t.Fatalf("prove of the store's own sequence 10: %v", err)
	}
	if res, err := ledger.CheckProof(p, r.a.VKey, ""); err != nil || res.Leaf.Seq != 10 || res.Checkpoint.Size != 60 {
		t.Fatalf("proof of the store's own sequence 10: %+v %v", res, err)
	}
}

// TestProveFallsBackPastAForgedNextSequence: an insider files a movement
// under the store's next sequence (61) before the store does. Verify names
// it; the newer checkpoints' roots then do not come from the archive's
// leaves, so prove of a movement an older checkpoint covers (sequence 10,
// in the one of size 60) rests on that one, and says why the newer was
// not taken.
func TestProveFallsBackPastAForgedNextSequence(t *testing.T) {
	r := newRig(t)
	publishInsider(t, r, "S0042", 61, "forged-next-61")
	r.a.Movements(r.ctx, t, r.js, 10) // 61..70, the store's own
	r.a.Checkpoint(r.ctx, t, r.js)
	r.records += 11
	r.wait(t)
	rep := r.verify(t)
	if rep.OK() || rep.Counts[audit.KindAltered] == 0 {
		t.Fatalf("verify: want the forged sequence 61 altered:\n%s", dump(rep))
	}
	var notes []string
	p, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: ledgertest.Key("S0042", 9), Store: "S0042", Roster: r.roster, NoWitness: true,
		Note: func(s string) { notes = append(notes, s) }})
	if err != nil {
		t.Fatalf("prove of sequence 10: %v", err)
	}
	res, err := ledger.CheckProof(p, r.a.VKey, "")
	if err != nil || res.Leaf.Seq != 10 || res.Checkpoint.Size != 60 {
		t.Fatalf("proof of sequence 10: %+v %v, want it in the checkpoint of size 60", res, err)
	}
	if len(notes) == 0 || !strings.Contains(strings.Join(notes, "\n"), "size 70") {
		t.Errorf("prove did not say why the checkpoint of size 70 was not used: %q", notes)
	}
	// The store's own sequence 65 is covered only by the checkpoint of
	// size 70, whose root the archive's first records do not give.
	if _, err := audit.Prove(r.ctx, audit.ProveOptions{Conn: r.nc, Key: ledgertest.Key("S0042", 64), Store: "S0042", Roster: r.roster, NoWitness: true}); err == nil {
		t.Error("prove of sequence 65 rests on a checkpoint the archive's leaves do not give")
	}
}
