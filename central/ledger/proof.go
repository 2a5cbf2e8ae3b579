package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// ProofFormat names the format of an inspector's proof file (Proof).
const ProofFormat = "rxedge.ledger.proof/1"

// MaxProof bounds a proof file before it is parsed.
const MaxProof = 1 << 20

// Proof is the self-contained proof that one movement is in its store's
// log, the file an inspector checks with no network (CheckProof). It is
// JSON:
//
//	{
//	  "format":     "rxedge.ledger.proof/1",
//	  "store":      "S0042",
//	  "payload":    "<the movement's canonical JSON, as a string>",
//	  "leaf":       {"seq": 1234, "key": "<32 hex>", "digest": "<64 hex>"},
//	  "index":      1233,
//	  "inclusion":  ["<base64 SHA-256>", ...],
//	  "checkpoint": "<the signed checkpoint note: text, blank line, signatures>"
//	}
//
// The leaf is the movement's entry in the log: its store sequence, key and
// the SHA-256 of the payload. Index is the leaf's position in the log
// (seq − the checkpoint's first sequence). Inclusion is the RFC 6962
// audit path of the leaf in the tree the checkpoint signs
// (tlog.ProveRecord's form, deepest sibling first). The checkpoint is
// the store's signed note (Checkpoint.Text), with head office's
// countersignature when the witness signed it.
type Proof struct {
	Format     string           `json:"format"`
	Store      string           `json:"store"`
	Payload    string           `json:"payload"`
	Leaf       ProofLeaf        `json:"leaf"`
	Index      int64            `json:"index"`
	Inclusion  tlog.RecordProof `json:"inclusion"`
	Checkpoint string           `json:"checkpoint"`
}

// ProofLeaf is a Leaf in hex, as a proof file writes it.
type ProofLeaf struct {
	Seq    uint64 `json:"seq"`
	Key    string `json:"key"`
	Digest string `json:"digest"`
}

// LeafOf is a proof file's form of l.
func LeafOf(l Leaf) ProofLeaf {
	return ProofLeaf{Seq: l.Seq, Key: hex.EncodeToString(l.Key[:]), Digest: hex.EncodeToString(l.Digest[:])}
}

// Leaf decodes the hex form.
func (p ProofLeaf) Leaf() (Leaf, error) {
	l := Leaf{Seq: p.Seq}
	k, kerr := hex.DecodeString(p.Key)
	d, derr := hex.DecodeString(p.Digest)
	if kerr != nil || derr != nil || len(k) != len(l.Key) || len(d) != len(l.Digest) || p.Seq == 0 ||
		hex.EncodeToString(k) != p.Key || hex.EncodeToString(d) != p.Digest {
		return l, errors.New("ledger: the leaf's key is not 32 and its digest not 64 lower-case hex digits")
	}
	copy(l.Key[:], k)
	copy(l.Digest[:], d)
	return l, nil
}

// Marshal encodes the proof, indented for a reader.
func (p Proof) Marshal() ([]byte, error) {
	if !utf8.ValidString(p.Payload) {
		return nil, errors.New("ledger: the payload is not UTF-8")
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ParseProof decodes a proof file, strictly: unknown fields, another
// format or trailing data are refused.
func ParseProof(b []byte) (Proof, error) {
	var p Proof
	if len(b) > MaxProof {
		return p, fmt.Errorf("ledger: proof over %d bytes", MaxProof)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil || d.More() {
		return Proof{}, errors.New("ledger: not a proof file (JSON of its form)")
	}
	if p.Format != ProofFormat {
		return Proof{}, fmt.Errorf("ledger: proof format is not %s", ProofFormat)
	}
	if len(p.Inclusion) > 64 {
		return Proof{}, errors.New("ledger: inclusion proof longer than any tree needs")
	}
	return p, nil
}

// ProofResult is what CheckProof established.
type ProofResult struct {
	Checkpoint Checkpoint
	Leaf       Leaf
	// Witnessed says the witness key given countersigned the checkpoint.
	Witnessed bool
}

// CheckProof checks a proof with no network: the payload's SHA-256 is the
// leaf's digest; the checkpoint is signed by storeKey (a verifier key of
// the proof's store) and, when witnessKey is not empty, countersigned by
// it; the leaf's index is its sequence's place in the checkpoint's log
// and inside its size; and the inclusion proof leads from the leaf's hash
// to the checkpoint's root. Each failure says which check failed.
func CheckProof(p Proof, storeKey, witnessKey string) (ProofResult, error) {
	var res ProofResult
	leaf, err := p.Leaf.Leaf()
	if err != nil {
		return res, err
	}
	if sha256.Sum256([]byte(p.Payload)) != leaf.Digest {
		return res, errors.New("ledger: the payload's SHA-256 is not the leaf's digest: the payload was changed")
	}
	sv, err := note.NewVerifier(storeKey)
	if err != nil {
		return res, fmt.Errorf("ledger: store key: %w", err)
	}
	if sv.Name() != KeyName(p.Store) {
		return res, fmt.Errorf("ledger: the store key given is %q's, not store %s's", sv.Name(), p.Store)
	}
	known := []note.Verifier{sv}
	var wv note.Verifier
	if witnessKey != "" {
		if wv, err = note.NewVerifier(witnessKey); err != nil {
			return res, fmt.Errorf("ledger: witness key: %w", err)
		}
		known = append(known, wv)
	}
	n, c, err := Open([]byte(p.Checkpoint), note.VerifierList(known...))
	if err != nil {
		return res, fmt.Errorf("ledger: the checkpoint's signature does not verify with the store key: %w", err)
	}
	if c.Store != p.Store {
		return res, fmt.Errorf("ledger: the checkpoint is store %s's, the proof says %s", c.Store, p.Store)
	}
	storeSigned := false
	for _, s := range n.Sigs {
		if s.Name == sv.Name() && s.Hash == sv.KeyHash() {
			storeSigned = true
		}
		if wv != nil && s.Name == wv.Name() && s.Hash == wv.KeyHash() {
			res.Witnessed = true
		}
	}
	if !storeSigned {
		return res, errors.New("ledger: the checkpoint is not signed by the store key given")
	}
	if wv != nil && !res.Witnessed {
		return res, errors.New("ledger: the checkpoint is not countersigned by the witness key given")
	}
	if leaf.Seq < c.First || int64(leaf.Seq-c.First) != p.Index || p.Index >= c.Size {
		return res, fmt.Errorf("ledger: sequence %d is not leaf %d of a log of %d leaves from sequence %d", leaf.Seq, p.Index, c.Size, c.First)
	}
	if err := tlog.CheckRecord(p.Inclusion, c.Size, c.Root, p.Index, leaf.Hash()); err != nil {
		return res, errors.New("ledger: the inclusion proof does not lead to the checkpoint's root")
	}
	res.Checkpoint, res.Leaf = c, leaf
	return res, nil
}

// InclusionBuilder builds the inclusion proof of leaf Index in the tree
// of Size leaves from the leaf hashes given in order (Add), in memory that
// does not grow with the tree: it keeps one Frontier per sibling subtree
// on the leaf's path (at most 64).
type InclusionBuilder struct {
	size, index, next int64
	ranges            [][2]int64 // the sibling subtrees, tlog's proof order
	trees             []Frontier
}

// NewInclusionBuilder starts the proof of leaf index in a tree of size.
func NewInclusionBuilder(size, index int64) (*InclusionBuilder, error) {
	if index < 0 || index >= size {
		return nil, fmt.Errorf("ledger: leaf %d is not in a tree of %d", index, size)
	}
	b := &InclusionBuilder{size: size, index: index}
	b.path(0, size)
	b.trees = make([]Frontier, len(b.ranges))
	return b, nil
}

// path lists the siblings of the leaf's path in [lo, hi), deepest first,
// as tlog's leafProof orders them.
func (b *InclusionBuilder) path(lo, hi int64) {
	if lo+1 == hi {
		return
	}
	k := int64(1)
	for k<<1 < hi-lo {
		k <<= 1
	}
	if b.index < lo+k {
		b.path(lo, lo+k)
		b.ranges = append(b.ranges, [2]int64{lo + k, hi})
	} else {
		b.path(lo+k, hi)
		b.ranges = append(b.ranges, [2]int64{lo, lo + k})
	}
}

// Add gives the next leaf's hash, from leaf 0 on.
func (b *InclusionBuilder) Add(h Hash) {
	i := b.next
	b.next++
	for k, r := range b.ranges {
		if r[0] <= i && i < r[1] {
			b.trees[k].Append(h)
			return
		}
	}
}

// Done says every leaf of the tree was given.
func (b *InclusionBuilder) Done() bool { return b.next >= b.size }

// Proof is the inclusion proof, once every leaf was given.
func (b *InclusionBuilder) Proof() (tlog.RecordProof, error) {
	if b.next != b.size {
		return nil, fmt.Errorf("ledger: %d of the tree's %d leaves given", b.next, b.size)
	}
	p := make(tlog.RecordProof, len(b.trees))
	for i, t := range b.trees {
		p[i] = t.Root()
	}
	return p, nil
}
