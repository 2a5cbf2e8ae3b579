package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"

	"golang.org/x/mod/sumdb/tlog"
)

// Hash is a node or leaf hash of a store's tree.
type Hash = tlog.Hash

// LeafSize is the length of an encoded Leaf.
const LeafSize = 8 + 16 + 32

// Leaf is one acknowledged movement in its store's log.
type Leaf struct {
	Seq    uint64   // the store sequence
	Key    [16]byte // the movement's key
	Digest [32]byte // SHA-256 of the canonical payload
}

// Bytes encodes the leaf: the sequence big-endian, the key, the digest.
func (l Leaf) Bytes() []byte {
	b := make([]byte, 0, LeafSize)
	b = binary.BigEndian.AppendUint64(b, l.Seq)
	b = append(b, l.Key[:]...)
	return append(b, l.Digest[:]...)
}

// Hash is the leaf's hash in the tree: SHA-256(0x00 || Bytes()), as
// tlog.RecordHash gives it, assembled on the stack: a verifier hashes
// every leaf of the archive.
func (l Leaf) Hash() Hash {
	var b [1 + LeafSize]byte
	binary.BigEndian.PutUint64(b[1:], l.Seq)
	copy(b[9:], l.Key[:])
	copy(b[25:], l.Digest[:])
	return sha256.Sum256(b[:])
}

// ParseLeaf decodes Bytes' encoding.
func ParseLeaf(b []byte) (Leaf, error) {
	var l Leaf
	if len(b) != LeafSize {
		return l, errors.New("ledger: a leaf is 56 bytes")
	}
	l.Seq = binary.BigEndian.Uint64(b)
	copy(l.Key[:], b[8:24])
	copy(l.Digest[:], b[24:])
	return l, nil
}
