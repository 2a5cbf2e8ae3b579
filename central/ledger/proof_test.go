package ledger_test

import (
	"crypto/rand"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/rxedge/agent/central/ledger"
)

func TestInclusionBuilderMatchesTlog(t *testing.T) {
	const max = 70
	var ref fullTree
	var hashes []ledger.Hash
	for i := 0; i < max; i++ {
		l := leafAt(i)
		ref.add(int64(i), l.Bytes())
		hashes = append(hashes, l.Hash())
	}
	for size := int64(1); size <= max; size++ {
		root, err := tlog.TreeHash(size, &ref)
		if err != nil {
			t.Fatal(err)
		}
		for n := int64(0); n < size; n++ {
			b, err := ledger.NewInclusionBuilder(size, n)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hashes[:size] {
				b.Add(h)
			}
			got, err := b.Proof()
			if err != nil {
				t.Fatal(err)
			}
			want, err := tlog.ProveRecord(size, n, &ref)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d in %d: %d hashes, tlog %d", n, size, len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%d in %d: hash %d differs from tlog's", n, size, i)
				}
			}
			if err := tlog.CheckRecord(got, size, root, n, hashes[n]); err != nil {
				t.Fatalf("%d in %d: %v", n, size, err)
			}
		}
	}
	if _, err := ledger.NewInclusionBuilder(3, 3); err == nil {
		t.Error("leaf 3 of a tree of 3 accepted")
	}
	b, _ := ledger.NewInclusionBuilder(3, 1)
	if _, err := b.Proof(); err == nil {
		t.Error("a proof given before its leaves")
	}
}

// proofFixture is a log of 9 movements, signed at size 9, and the proof
// of the movement at index 5.
func proofFixture(t *testing.T) (ledger.Proof, string, note.Signer, string, note.Signer) {
	t.Helper()
	skey, vkey, err := ledger.GenerateKey(rand.Reader, "S0042")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	wskey, wvkey, _ := note.GenerateKey(rand.Reader, "rxedge-witness")
	wsigner, _ := note.NewSigner(wskey)
	const first, size, index = 100, 9, 5
	var f ledger.Frontier
	b, _ := ledger.NewInclusionBuilder(size, index)
	var payload string
	var leaf ledger.Leaf
	for i := 0; i < size; i++ {
		p := `{"movement_id":"m` + string(rune('0'+i)) + `"}`
		l := ledger.Leaf{Seq: first + uint64(i), Digest: sha256.Sum256([]byte(p))}
		l.Key[0] = byte(i)
		f.Append(l.Hash())
		b.Add(l.Hash())
		if i == index {
			payload, leaf = p, l
		}
	}
	incl, err := b.Proof()
	if err != nil {
		t.Fatal(err)
	}
	c := ledger.Checkpoint{Store: "S0042", Log: "0123456789abcdef", Size: size, Root: f.Root(), First: first, Time: time.Unix(1, 0)}
	signed, err := ledger.Sign(c, signer)
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := ledger.Open(signed, note.VerifierList(mustVerifier(t, vkey)))
	if err != nil {
		t.Fatal(err)
	}
	counter, err := note.Sign(n, wsigner)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.Proof{Format: ledger.ProofFormat, Store: "S0042", Payload: payload, Leaf: ledger.LeafOf(leaf),
		Index: index, Inclusion: incl, Checkpoint: string(counter)}, vkey, signer, wvkey, wsigner
}

func mustVerifier(t *testing.T, vkey string) note.Verifier {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCheckProof(t *testing.T) {
	p, vkey, _, wvkey, _ := proofFixture(t)
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ledger.ParseProof(b)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ledger.CheckProof(got, vkey, wvkey)
	if err != nil || !res.Witnessed || res.Leaf.Seq != 105 || res.Checkpoint.Size != 9 {
		t.Fatalf("good proof: %+v %v", res, err)
	}
	if _, err := ledger.CheckProof(got, vkey, ""); err != nil {
		t.Fatalf("good proof, no witness key: %v", err)
	}
	_, otherV, _ := ledger.GenerateKey(rand.Reader, "S0042")
	_, otherStore, _ := ledger.GenerateKey(rand.Reader, "S0043")
	_, otherW, _ := note.GenerateKey(rand.Reader, "rxedge-witness")
	for name, tc := range map[string]struct {
		edit     func(*ledger.Proof)
		key, wit string
		want     string
	}{
		"payload changed":     {func(p *ledger.Proof) { p.Payload = strings.Replace(p.Payload, "m5", "m6", 1) }, vkey, "", "payload was changed"},
		"digest and payload":  {func(p *ledger.Proof) { p.Payload = `{"x":1}`; p.Leaf.Digest = hexSum(`{"x":1}`) }, vkey, "", "inclusion proof"},
		"other index":         {func(p *ledger.Proof) { p.Index = 4 }, vkey, "", "is not leaf"},
		"seq moved":           {func(p *ledger.Proof) { p.Leaf.Seq = 104; p.Index = 4 }, vkey, "", "inclusion proof"},
		"proof hash changed":  {func(p *ledger.Proof) { p.Inclusion[0][0] ^= 1 }, vkey, "", "inclusion proof"},
		"another key":         {func(*ledger.Proof) {}, otherV, "", "does not verify"},
		"another store's key": {func(*ledger.Proof) {}, otherStore, "", "not store S0042's"},
		"another witness":     {func(*ledger.Proof) {}, vkey, otherW, "not countersigned"},
		"checkpoint edited":   {func(p *ledger.Proof) { p.Checkpoint = strings.Replace(p.Checkpoint, "\n9\n", "\n10\n", 1) }, vkey, "", "does not verify"},
		"store renamed":       {func(p *ledger.Proof) { p.Store = "S0043" }, otherStore, "", "does not verify"},
		"bad leaf hex":        {func(p *ledger.Proof) { p.Leaf.Key = "AB" + p.Leaf.Key[2:] }, vkey, "", "hex"},
	} {
		q, _ := ledger.ParseProof(b)
		tc.edit(&q)
		if _, err := ledger.CheckProof(q, tc.key, tc.wit); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	for _, bad := range []string{`{}`, strings.Replace(string(b), ledger.ProofFormat, "other/1", 1), string(b) + "{}", strings.Replace(string(b), `"index"`, `"x":1,"index"`, 1)} {
		if _, err := ledger.ParseProof([]byte(bad)); err == nil {
			t.Errorf("%.60q parsed", bad)
		}
	}
}

func hexSum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return ledger.LeafOf(ledger.Leaf{Seq: 1, Digest: sum}).Digest
}
