package ledger_test

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
)

// fullTree is a tree kept the way tlog keeps one (every stored hash), the
// independent reference the frontier is checked against.
type fullTree struct{ stored []tlog.Hash }

func (t *fullTree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = t.stored[x]
	}
	return out, nil
}

func (t *fullTree) add(n int64, leaf []byte) {
	hs, err := tlog.StoredHashes(n, leaf, t)
	if err != nil {
		panic(err)
	}
	t.stored = append(t.stored, hs...)
}

func leafAt(i int) ledger.Leaf {
	l := ledger.Leaf{Seq: uint64(i + 1)}
	l.Key[0], l.Key[15] = byte(i), byte(i>>8)
	l.Digest = sha256.Sum256([]byte{byte(i), byte(i >> 8)})
	return l
}

// A leaf's hash is tlog's record hash of its bytes, however it is
// computed.
func TestLeafHashIsTlogs(t *testing.T) {
	for i := 0; i < 100; i++ {
		l := leafAt(i * 7919)
		if got, want := l.Hash(), tlog.RecordHash(l.Bytes()); got != want {
			t.Fatalf("leaf %d: hash %v, tlog's %v", i, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = leafAt(1).Hash() }); n != 0 {
		t.Errorf("a leaf's hash allocates %v times", n)
	}
}

func TestFrontierMatchesTlog(t *testing.T) {
	var f ledger.Frontier
	var ref fullTree
	for i := 0; i <= 300; i++ {
		want, err := tlog.TreeHash(int64(i), &ref)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Root(); got != want {
			t.Fatalf("size %d: root %v, tlog %v", i, got, want)
		}
		b, err := f.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var g ledger.Frontier
		if err := g.UnmarshalBinary(b); err != nil || g.Root() != f.Root() || g.Size != f.Size {
			t.Fatalf("size %d: round trip gave %+v, %v", i, g, err)
		}
		l := leafAt(i)
		ref.add(int64(i), l.Bytes())
		f.Append(l.Hash())
	}
}

func TestProveConsistency(t *testing.T) {
	const max = 70
	var ref fullTree
	var frontiers []ledger.Frontier
	var leaves []ledger.Hash
	var f ledger.Frontier
	for i := 0; i < max; i++ {
		frontiers = append(frontiers, f.Clone())
		l := leafAt(i)
		ref.add(int64(i), l.Bytes())
		leaves = append(leaves, l.Hash())
		f.Append(l.Hash())
	}
	frontiers = append(frontiers, f.Clone())
	for m := 1; m <= max; m++ {
		for n := m; n <= max; n++ {
			p, err := ledger.ProveConsistency(frontiers[m], leaves[m:n])
			if err != nil {
				t.Fatalf("%d→%d: %v", m, n, err)
			}
			oldRoot, newRoot := frontiers[m].Root(), frontiers[n].Root()
			if err := ledger.CheckConsistency(p, int64(m), oldRoot, int64(n), newRoot); err != nil {
				t.Fatalf("%d→%d: proof does not check: %v", m, n, err)
			}
			if n > m {
				want, err := tlog.ProveTree(int64(n), int64(m), &ref)
				if err != nil {
					t.Fatal(err)
				}
				if len(want) != len(p) {
					t.Fatalf("%d→%d: %d proof hashes, tlog %d", m, n, len(p), len(want))
				}
				for i := range p {
					if p[i] != want[i] {
						t.Fatalf("%d→%d: proof differs from tlog's at %d", m, n, i)
					}
				}
				// A different leaf anywhere in the old part forks the tree:
				// its proof cannot check against the old root.
				forked := frontiers[m].Clone()
				forked.Nodes[0][0] ^= 1
				fp, _ := ledger.ProveConsistency(forked, leaves[m:n])
				var g ledger.Frontier = forked.Clone()
				for _, h := range leaves[m:n] {
					g.Append(h)
				}
				if ledger.CheckConsistency(fp, int64(m), oldRoot, int64(n), g.Root()) == nil {
					t.Fatalf("%d→%d: a forked tree passed as consistent", m, n)
				}
			}
		}
	}
	if ledger.CheckConsistency(nil, 5, frontiers[5].Root(), 5, frontiers[4].Root()) == nil {
		t.Error("two roots of one size passed as consistent")
	}
	if ledger.CheckConsistency(nil, 6, frontiers[6].Root(), 5, frontiers[5].Root()) == nil {
		t.Error("a shrinking tree passed as consistent")
	}
}

func TestFrontierRefusesBadEncoding(t *testing.T) {
	var f ledger.Frontier
	for _, b := range [][]byte{nil, make([]byte, 7), append(make([]byte, 7), 3), append(append(make([]byte, 7), 1), make([]byte, 31)...)} {
		if f.UnmarshalBinary(b) == nil {
			t.Errorf("%x accepted", b)
		}
	}
}

func TestCheckpointSignAndOpen(t *testing.T) {
	skey, vkey, err := ledger.GenerateKey(rand.Reader, "S0042")
	if err != nil {
		t.Fatal(err)
	}
	otherS, otherV, _ := ledger.GenerateKey(rand.Reader, "S0043")
	signer, _ := note.NewSigner(skey)
	other, _ := note.NewSigner(otherS)
	v, _ := note.NewVerifier(vkey)
	ov, _ := note.NewVerifier(otherV)
	known := note.VerifierList(v, ov)

	c := ledger.Checkpoint{Store: "S0042", Log: "0123456789abcdef", Size: 3, Root: leafAt(1).Hash(), First: 17, Time: time.Date(2026, 12, 3, 10, 0, 0, 5, time.UTC)}
	msg, err := ledger.Sign(c, signer)
	if err != nil {
		t.Fatal(err)
	}
	_, got, err := ledger.Open(msg, known)
	if err != nil || got != c {
		t.Fatalf("Open = %+v, %v; want %+v", got, err, c)
	}
	if _, err := ledger.Sign(c, other); err == nil {
		t.Error("store S0043's key signed a checkpoint of S0042")
	}
	// Another store's key over S0042's checkpoint text: the signature is
	// valid, the signer is not the store.
	forged, _ := note.Sign(&note.Note{Text: c.Text()}, other)
	if _, _, err := ledger.Open(forged, known); err == nil || !strings.Contains(err.Error(), "not signed by a key of that store") {
		t.Errorf("forged checkpoint: %v", err)
	}
	// Changed text under the store's signature.
	bad := strings.Replace(string(msg), "\n3\n", "\n4\n", 1)
	if _, _, err := ledger.Open([]byte(bad), known); err == nil {
		t.Error("altered checkpoint opened")
	}
	// Unknown key only.
	if _, _, err := ledger.Open(msg, note.VerifierList(ov)); err == nil {
		t.Error("checkpoint opened with no key of its store known")
	}
}

func TestParseCheckpointRefuses(t *testing.T) {
	good := ledger.Checkpoint{Store: "S1", Log: "0123456789abcdef", Size: 1, First: 1, Time: time.Unix(0, 0)}.Text()
	if _, err := ledger.ParseCheckpoint(good); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"extra line":  good + "x\n",
		"no newline":  strings.TrimSuffix(good, "\n"),
		"bad origin":  strings.Replace(good, "rxedge.ledger/", "other/", 1),
		"bad store":   strings.Replace(good, "/S1/", "/S 1/", 1),
		"bad log":     strings.Replace(good, "0123456789abcdef", "0123456789ABCDEF", 1),
		"size sign":   strings.Replace(good, "\n1\n", "\n+1\n", 1),
		"size zeros":  strings.Replace(good, "\n1\n", "\n01\n", 1),
		"first zero":  strings.Replace(good, "first 1", "first 0", 1),
		"bad time":    strings.Replace(good, "time 1970", "time 70", 1),
		"huge":        good + strings.Repeat("x", 600),
		"short root":  strings.Replace(good, "AAAA", "", 1),
		"other field": strings.Replace(good, "first 1", "last 1", 1),
	} {
		if _, err := ledger.ParseCheckpoint(text); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestStorePatternIsCentrals(t *testing.T) {
	for _, s := range []string{"S0042", "a", strings.Repeat("x", 32), strings.Repeat("x", 33), "a.b", "a b", "", "a*", "é"} {
		_, _, err := ledger.GenerateKey(rand.Reader, s)
		if (err == nil) != (central.ValidStoreID(s) || s == central.FleetToken) {
			t.Errorf("%q: ledger accepts %v, central %v", s, err == nil, central.ValidStoreID(s))
		}
	}
}

func TestCheckpointToken(t *testing.T) {
	tok := ledger.CheckpointToken("0123456789abcdef", 42)
	log, size, err := ledger.ParseCheckpointToken(tok)
	if err != nil || log != "0123456789abcdef" || size != 42 || !ledger.IsCheckpointToken(tok) {
		t.Fatalf("%q: %q %d %v", tok, log, size, err)
	}
	if ledger.IsCheckpointToken(strings.Repeat("a", 32)) {
		t.Error("a movement key taken for a checkpoint")
	}
	for _, bad := range []string{"cp-", "cp-0123456789abcdef-", "cp-0123456789abcdef--1", "cp-0123456789abcdef-01", "cp-xyz-1"} {
		if _, _, err := ledger.ParseCheckpointToken(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseMessage(t *testing.T) {
	m := ledger.Message{Note: "n", PrevSize: 2, Proof: tlog.TreeProof{leafAt(0).Hash()}}
	b, _ := m.Marshal()
	got, err := ledger.ParseMessage(b)
	if err != nil || got.Note != "n" || got.PrevSize != 2 || len(got.Proof) != 1 || got.Proof[0] != m.Proof[0] {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{`{}`, `{"note":"n","x":1}`, `{"note":"n","prev_size":-1}`, `{"note":"n"} {}`, `[]`, strings.Repeat(" ", ledger.MaxMessage+1)} {
		if _, err := ledger.ParseMessage([]byte(bad)); err == nil {
			t.Errorf("%.40q accepted", bad)
		}
	}
}

func TestCheckpointMsgID(t *testing.T) {
	tok := ledger.CheckpointToken("0123456789abcdef", 42)
	id := ledger.CheckpointMsgID(tok, []byte(`{"note":"x"}`))
	if !ledger.IsCheckpointToken(id) {
		t.Fatalf("%s is not told a checkpoint", id)
	}
	log, size, err := ledger.ParseCheckpointMsgID(id)
	if err != nil || log != "0123456789abcdef" || size != 42 {
		t.Fatalf("ledger.ParseCheckpointMsgID(%s) = %s, %d, %v", id, log, size, err)
	}
	if ledger.CheckpointMsgID(tok, []byte(`{"note":"y"}`)) == id {
		t.Fatal("two bodies share a message id")
	}
	if log, size, err := ledger.ParseCheckpointMsgID(tok); err != nil || log != "0123456789abcdef" || size != 42 {
		t.Errorf("the bare token: %s, %d, %v", log, size, err)
	}
	for _, bad := range []string{tok + "-", tok + "-0123", id + "0", "cp-xyz-1-" + id[len(id)-32:], id[:len(id)-1] + "G"} {
		if _, _, err := ledger.ParseCheckpointMsgID(bad); err == nil {
			t.Errorf("ledger.ParseCheckpointMsgID(%q) accepted", bad)
		}
	}
}

// TestSignerKeyID: the key id read from a checkpoint's signature line is
// that of the key that signed it (KeyID of its verifier key), not of
// another key of the same store or of another store.
func TestSignerKeyID(t *testing.T) {
	skey, vkey, _ := ledger.GenerateKey(rand.Reader, "S0042")
	_, vkey2, _ := ledger.GenerateKey(rand.Reader, "S0042")
	otherS, _, _ := ledger.GenerateKey(rand.Reader, "S0043")
	signer, _ := note.NewSigner(skey)
	other, _ := note.NewSigner(otherS)
	c := ledger.Checkpoint{Store: "S0042", Log: "0123456789abcdef", Size: 3, Root: leafAt(1).Hash(), First: 1, Time: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	msg, err := ledger.Sign(c, signer)
	if err != nil {
		t.Fatal(err)
	}
	id := ledger.SignerKeyID(msg, "S0042")
	if id == "" || id != ledger.KeyID(vkey) || !strings.HasPrefix(vkey, id+"+") {
		t.Fatalf("SignerKeyID = %q, KeyID(vkey) = %q, vkey %s", id, ledger.KeyID(vkey), vkey)
	}
	if id == ledger.KeyID(vkey2) {
		t.Fatal("two keys of one store have one id")
	}
	if got := ledger.SignerKeyID(msg, "S0043"); got != "" {
		t.Errorf("S0043's key id on S0042's checkpoint: %q", got)
	}
	forged, _ := note.Sign(&note.Note{Text: c.Text()}, other)
	if got := ledger.SignerKeyID(forged, "S0042"); got != "" {
		t.Errorf("a checkpoint signed by S0043 has S0042's key id %q", got)
	}
	for _, bad := range []string{"", "garbage", "a+b", "rxedge-store-S0042+xyz+AAAA"} {
		if got := ledger.KeyID(bad); got != "" {
			t.Errorf("KeyID(%q) = %q", bad, got)
		}
		if got := ledger.SignerKeyID([]byte(bad), "S0042"); got != "" {
			t.Errorf("SignerKeyID(%q) = %q", bad, got)
		}
	}
}

// TestOpenMessage: only a checkpoint message whose note a known key of
// the record's own store signed opens, whatever its id says; the id only
// marks it misnamed.
func TestOpenMessage(t *testing.T) {
	skey, vkey, _ := ledger.GenerateKey(rand.Reader, "S0042")
	otherS, otherV, _ := ledger.GenerateKey(rand.Reader, "S0043")
	signer, _ := note.NewSigner(skey)
	other, _ := note.NewSigner(otherS)
	v, _ := note.NewVerifier(vkey)
	ov, _ := note.NewVerifier(otherV)
	known := note.VerifierList(v, ov)
	c := ledger.Checkpoint{Store: "S0042", Log: "0123456789abcdef", Size: 3, Root: leafAt(1).Hash(), First: 17, Time: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	body := func(n []byte) []byte {
		b, _ := ledger.Message{Note: string(n), PrevSize: 2}.Marshal()
		return b
	}
	signed, _ := ledger.Sign(c, signer)
	good := body(signed)
	id := ledger.CheckpointMsgID(ledger.CheckpointToken(c.Log, c.Size), good)
	byOther, _ := note.Sign(&note.Note{Text: c.Text()}, other)
	c43 := c
	c43.Store = "S0043"
	theirs, _ := ledger.Sign(c43, other)
	for _, tc := range []struct {
		name, store, id string
		body            []byte
		want            error
		misnamed        bool
	}{
		{"genuine", "S0042", id, good, nil, false},
		{"under another size's id", "S0042", ledger.CheckpointToken(c.Log, 1<<40), good, nil, true},
		{"under another log's id", "S0042", ledger.CheckpointToken("fedcba9876543210", 3), good, nil, true},
		{"not a checkpoint id", "S0042", "cp-nonsense", good, ledger.ErrNotCheckpointID, false},
		{"not a message", "S0042", id, []byte(`{"note":`), ledger.ErrMalformed, false},
		{"unsigned", "S0042", id, body([]byte(c.Text() + "\n")), ledger.ErrNotSigned, false},
		{"text only", "S0042", id, body([]byte(c.Text())), ledger.ErrNotSigned, false},
		{"another store's key", "S0042", id, body(byOther), ledger.ErrNotSigned, false},
		{"another store's checkpoint", "S0042", id, body(theirs), ledger.ErrNotSigned, false},
		{"changed under the signature", "S0042", id, body([]byte(strings.Replace(string(signed), "\n3\n", "\n4\n", 1))), ledger.ErrNotSigned, false},
		{"on another store's subjects", "S0043", id, good, ledger.ErrNotSigned, false},
	} {
		got, err := ledger.OpenMessage(tc.store, tc.id, tc.body, known)
		if !errors.Is(err, tc.want) || (err != nil) != (tc.want != nil) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
			continue
		}
		if err == nil && (got.Checkpoint != c || got.Misnamed != tc.misnamed || got.Text != string(signed) || got.Message.PrevSize != 2 || len(got.Note.Sigs) != 1) {
			t.Errorf("%s: %+v, want the checkpoint of size 3, misnamed %v", tc.name, got, tc.misnamed)
		}
	}
}
