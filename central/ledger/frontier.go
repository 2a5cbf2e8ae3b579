package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"golang.org/x/mod/sumdb/tlog"
)

// Frontier is a tree of Size leaves kept as the roots of its maximal
// complete subtrees, largest (leftmost) first: one per bit set in Size.
// It is all that appending a leaf and computing the root need.
type Frontier struct {
	Size  int64
	Nodes []Hash
}

// Append adds a leaf hash to the tree.
func (f *Frontier) Append(h Hash) {
	// Each trailing one bit of Size is a complete subtree of the new
	// leaf's size that the leaf now completes into one twice as big.
	for n := bits.TrailingZeros64(^uint64(f.Size)); n > 0; n-- {
		last := len(f.Nodes) - 1
		h = tlog.NodeHash(f.Nodes[last], h)
		f.Nodes = f.Nodes[:last]
	}
	f.Nodes = append(f.Nodes, h)
	f.Size++
}

// emptyRoot is the root of the empty tree, SHA-256 of nothing.
var emptyRoot = Hash(sha256.Sum256(nil))

// Root is the tree's root hash (RFC 6962; tlog.TreeHash's).
func (f Frontier) Root() Hash {
	if len(f.Nodes) == 0 {
		return emptyRoot
	}
	h := f.Nodes[len(f.Nodes)-1]
	for i := len(f.Nodes) - 2; i >= 0; i-- {
		h = tlog.NodeHash(f.Nodes[i], h)
	}
	return h
}

// Clone returns a copy that does not share Nodes.
func (f Frontier) Clone() Frontier {
	return Frontier{Size: f.Size, Nodes: append([]Hash(nil), f.Nodes...)}
}

// Valid reports whether Nodes has one hash per bit set in Size.
func (f Frontier) Valid() bool {
	return f.Size >= 0 && len(f.Nodes) == bits.OnesCount64(uint64(f.Size))
}

// MarshalBinary encodes the frontier: Size big-endian, then the nodes.
func (f Frontier) MarshalBinary() ([]byte, error) {
	if !f.Valid() {
		return nil, errors.New("ledger: frontier nodes do not match its size")
	}
	b := make([]byte, 8, 8+len(f.Nodes)*tlog.HashSize)
	binary.BigEndian.PutUint64(b, uint64(f.Size))
	for _, h := range f.Nodes {
		b = append(b, h[:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes MarshalBinary's encoding.
func (f *Frontier) UnmarshalBinary(b []byte) error {
	if len(b) < 8 {
		return errors.New("ledger: short frontier")
	}
	size := int64(binary.BigEndian.Uint64(b))
	b = b[8:]
	if size < 0 || len(b) != bits.OnesCount64(uint64(size))*tlog.HashSize {
		return errors.New("ledger: frontier nodes do not match its size")
	}
	nodes := make([]Hash, 0, len(b)/tlog.HashSize)
	for ; len(b) > 0; b = b[tlog.HashSize:] {
		nodes = append(nodes, Hash(b[:tlog.HashSize]))
	}
	*f = Frontier{Size: size, Nodes: nodes}
	return nil
}

// ProveConsistency proves that the tree old extended by the leaf hashes
// added contains old as a prefix (RFC 6962's consistency proof, in
// tlog.TreeProof's form: check it with CheckConsistency). It needs no
// other part of the tree: every proof node is either a subtree of old's
// frontier or made of added leaves.
func ProveConsistency(old Frontier, added []Hash) (tlog.TreeProof, error) {
	if !old.Valid() {
		return nil, errors.New("ledger: frontier nodes do not match its size")
	}
	if old.Size == 0 || len(added) == 0 {
		return tlog.TreeProof{}, nil
	}
	// Where each frontier node starts, by level.
	starts := make(map[[2]int64]Hash, len(old.Nodes))
	var lo int64
	for _, h := range old.Nodes {
		// Each node covers the largest power of two that fits in what is
		// left of Size after the nodes before it.
		level := 63 - bits.LeadingZeros64(uint64(old.Size-lo))
		starts[[2]int64{int64(level), lo >> level}] = h
		lo += 1 << level
	}
	t := old.Size + int64(len(added))
	r := tlog.HashReaderFunc(func(indexes []int64) ([]Hash, error) {
		out := make([]Hash, len(indexes))
		for i, x := range indexes {
			level, n := tlog.SplitStoredHashIndex(x)
			first, end := n<<level, (n+1)<<level
			switch {
			case end <= old.Size:
				h, ok := starts[[2]int64{int64(level), n}]
				if !ok {
					return nil, fmt.Errorf("ledger: proof needs subtree [%d,%d) of the old tree, which its frontier does not hold", first, end)
				}
				out[i] = h
			case first >= old.Size && end <= t:
				out[i] = subtreeHash(added[first-old.Size : end-old.Size])
			default:
				return nil, fmt.Errorf("ledger: proof needs subtree [%d,%d), across the old tree's end", first, end)
			}
		}
		return out, nil
	})
	return tlog.ProveTree(t, old.Size, r)
}

// subtreeHash is the root of a complete subtree (len(leaves) a power of two).
func subtreeHash(leaves []Hash) Hash {
	if len(leaves) == 1 {
		return leaves[0]
	}
	half := len(leaves) / 2
	return tlog.NodeHash(subtreeHash(leaves[:half]), subtreeHash(leaves[half:]))
}

// CheckConsistency verifies a ProveConsistency proof that the tree of
// newSize leaves with root newRoot extends the tree of oldSize leaves with
// root oldRoot. A tree extends the empty tree and itself trivially.
func CheckConsistency(p tlog.TreeProof, oldSize int64, oldRoot Hash, newSize int64, newRoot Hash) error {
	switch {
	case oldSize < 0 || newSize < oldSize:
		return fmt.Errorf("ledger: a tree of %d leaves cannot extend one of %d", newSize, oldSize)
	case oldSize == 0:
		return nil
	case oldSize == newSize:
		if oldRoot != newRoot || len(p) != 0 {
			return errors.New("ledger: two different trees of the same size")
		}
		return nil
	}
	return tlog.CheckTree(p, newSize, newRoot, oldSize, oldRoot)
}
