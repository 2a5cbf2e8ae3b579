package reconcile

import (
	"encoding/binary"
	"math/bits"
)

// bloom is a Bloom filter of movement keys: the first pass over the
// archive asks it whether each key was seen before, at a memory of
// bitsPerKey to twice that bits per archived record, and only the keys it
// says yes to (every key archived twice, and at most about 0.05% of the
// others) are looked at again, exactly, by a second pass. A key is already the first 128 bits of
// a SHA-256, so its two halves are the two hashes of double hashing.
type bloom struct {
	bits []uint64
	mask uint64
}

const (
	bitsPerKey  = 16
	bloomHashes = 11
)

// newBloom returns a filter for n keys: bitsPerKey bits per key rounded
// up to a power of two, at least 8 KiB, and at most maxBytes rounded down
// to a power of two (0: no bound).
func newBloom(n uint64, maxBytes uint64) *bloom {
	size := uint64(1) << 16
	for size < n*bitsPerKey && size < 1<<62 {
		size <<= 1
	}
	if maxBytes > 0 && maxBytes*8 >= 1<<16 {
		limit := uint64(1) << (63 - bits.LeadingZeros64(maxBytes*8))
		size = min(size, limit)
	}
	return &bloom{bits: make([]uint64, size/64), mask: size - 1}
}

// addSeen adds key and reports whether every one of its bits was set
// already: whether it may have been added before.
func (b *bloom) addSeen(key [16]byte) bool {
	h1 := binary.LittleEndian.Uint64(key[:8])
	h2 := binary.LittleEndian.Uint64(key[8:]) | 1
	seen := true
	for i := range uint64(bloomHashes) {
		p := (h1 + i*h2) & b.mask
		w, m := p/64, uint64(1)<<(p%64)
		if b.bits[w]&m == 0 {
			seen = false
			b.bits[w] |= m
		}
	}
	return seen
}

// has reports whether every bit of key is set: whether it may have been
// added.
func (b *bloom) has(key [16]byte) bool {
	h1 := binary.LittleEndian.Uint64(key[:8])
	h2 := binary.LittleEndian.Uint64(key[8:]) | 1
	for i := range uint64(bloomHashes) {
		p := (h1 + i*h2) & b.mask
		if b.bits[p/64]&(uint64(1)<<(p%64)) == 0 {
			return false
		}
	}
	return true
}

// bytes is the filter's memory.
func (b *bloom) bytes() uint64 { return uint64(len(b.bits)) * 8 }
