package queue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

// The synced bucket holds the synced movements in blocks: a block is one
// bbolt entry, keyed by the first sequence it holds (8 bytes, big
// endian), holding up to syncedBlockLen movements in sequence order, and
// every sequence from its key up to the next block's key lives in it.
// A bbolt entry costs 16 bytes of page header and 8 of key besides its
// value; within a block, each movement after the first stores its
// sequence, central sequence and time as differences from the one
// before it, which a settlement makes small (consecutive sequences, one
// time). A synced movement then costs about 52 bytes instead of 85.
//
// Block value: form (1), count (uvarint), then per movement: sequence
// minus the previous one (uvarint; the block key for the first, so 0),
// key (16), digest (32), class (1), central sequence (uvarint for the
// first, zigzag difference after), acknowledgement time (unix
// nanoseconds, varint for the first, difference after).
const (
	syncedBlockForm = 1
	// syncedBlockLen keeps a block's value near 1,900 bytes: two blocks
	// fill a 4 KiB page, the bucket being written with FillPercent 1.
	syncedBlockLen = 36
)

// syncedEntry is one synced movement: a movement central stored, kept
// until the dedupe horizon passes.
type syncedEntry struct {
	Seq       uint64
	Key       [16]byte
	Digest    [32]byte
	Class     movement.Class
	StreamSeq uint64
	At        time.Time // when it was acknowledged
}

func encodeSyncedBlock(es []syncedEntry) []byte {
	b := make([]byte, 0, 2+len(es)*56+20)
	b = append(b, syncedBlockForm)
	b = binary.AppendUvarint(b, uint64(len(es)))
	for i, e := range es {
		if i == 0 {
			b = binary.AppendUvarint(b, 0)
		} else {
			b = binary.AppendUvarint(b, e.Seq-es[i-1].Seq)
		}
		b = append(b, e.Key[:]...)
		b = append(b, e.Digest[:]...)
		b = append(b, byte(e.Class))
		if i == 0 {
			b = binary.AppendUvarint(b, e.StreamSeq)
			b = binary.AppendVarint(b, e.At.UnixNano())
		} else {
			b = binary.AppendVarint(b, int64(e.StreamSeq-es[i-1].StreamSeq))
			b = binary.AppendVarint(b, e.At.UnixNano()-es[i-1].At.UnixNano())
		}
	}
	return b
}

// decodeSyncedBlock decodes the block stored under k, checking that its
// sequences start at k and rise.
func decodeSyncedBlock(k, v []byte) ([]syncedEntry, error) {
	if len(k) != 8 || len(v) < 2 || v[0] != syncedBlockForm {
		return nil, errCorrupt
	}
	d := decoder{b: v[1:]}
	n := d.uvarint()
	if d.err || n == 0 || n > uint64(len(v))/50 {
		return nil, errCorrupt
	}
	es := make([]syncedEntry, n)
	seq := binary.BigEndian.Uint64(k)
	var stream uint64
	var at int64
	for i := range es {
		delta := d.uvarint()
		if (i == 0) != (delta == 0) || seq+delta < seq {
			return nil, errCorrupt
		}
		seq += delta
		e := &es[i]
		e.Seq = seq
		copy(e.Key[:], d.bytes(16))
		copy(e.Digest[:], d.bytes(32))
		e.Class = movement.Class(d.byte())
		if i == 0 {
			stream, at = d.uvarint(), d.varint()
		} else {
			stream, at = stream+uint64(d.varint()), at+d.varint()
		}
		e.StreamSeq, e.At = stream, time.Unix(0, at)
	}
	if d.err || len(d.b) != 0 {
		return nil, errCorrupt
	}
	return es, nil
}

// syncedBlockAt finds the block that holds seq if anything does: the
// one with the greatest key not above seq. It returns the block's key
// and the next block's key (math.MaxUint64 when none), the bound of the
// block's sequences; k is nil when no block starts at or before seq.
func syncedBlockAt(bk *bolt.Bucket, seq uint64) (k, v []byte, next uint64) {
	c := bk.Cursor()
	next = math.MaxUint64
	k, v = c.Seek(u64(seq))
	switch {
	case k != nil && binary.BigEndian.Uint64(k) == seq:
		if nk, _ := c.Next(); nk != nil {
			next = binary.BigEndian.Uint64(nk)
		}
		return k, v, next
	case k != nil:
		next = binary.BigEndian.Uint64(k)
		k, v = c.Prev()
	default:
		k, v = c.Last()
	}
	return k, v, next
}

// syncedReader reads synced movements by sequence, keeping the last
// block it decoded: reads in sequence order decode each block once.
type syncedReader struct {
	bk       *bolt.Bucket
	lo, hi   uint64 // the cached block's range, [lo, hi)
	entries  []syncedEntry
	hasCache bool
}

func (b txBuckets) syncedReader() *syncedReader { return &syncedReader{bk: b.synced} }

// get returns the synced movement of sequence seq, if the file holds it.
func (r *syncedReader) get(seq uint64) (syncedEntry, bool, error) {
	if !r.hasCache || seq < r.lo || seq >= r.hi {
		k, v, next := syncedBlockAt(r.bk, seq)
		if k == nil {
			return syncedEntry{}, false, nil
		}
		es, err := decodeSyncedBlock(k, v)
		if err != nil {
			return syncedEntry{}, false, fmt.Errorf("synced block %x: %w", k, err)
		}
		r.lo, r.hi, r.entries, r.hasCache = binary.BigEndian.Uint64(k), next, es, true
	}
	i, ok := slices.BinarySearchFunc(r.entries, seq, func(e syncedEntry, s uint64) int {
		return cmpU64(e.Seq, s)
	})
	if !ok {
		return syncedEntry{}, false, nil
	}
	return r.entries[i], true, nil
}

// syncedGet reads one synced movement.
func (b txBuckets) syncedGet(seq uint64) (syncedEntry, bool, error) {
	return b.syncedReader().get(seq)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// putSynced adds synced movements, which the file does not hold as
// synced, to the blocks their sequences fall in; a block that grows past
// syncedBlockLen is cut into blocks of syncedBlockLen from its start. A
// settlement's movements mostly follow every sequence held, so they
// fill the last block and then new ones.
func (b txBuckets) putSynced(es []syncedEntry) error {
	es = slices.Clone(es)
	slices.SortFunc(es, func(x, y syncedEntry) int { return cmpU64(x.Seq, y.Seq) })
	b.synced.FillPercent = 1.0
	for len(es) > 0 {
		k, v, next := syncedBlockAt(b.synced, es[0].Seq)
		var held []syncedEntry
		if k != nil {
			var err error
			if held, err = decodeSyncedBlock(k, v); err != nil {
				return fmt.Errorf("synced block %x: %w", k, err)
			}
			k = bytes.Clone(k)
		}
		n := 0
		for n < len(es) && es[n].Seq < next {
			n++
		}
		merged := mergeSynced(held, es[:n])
		if merged == nil {
			return fmt.Errorf("sequence %d is synced already", es[0].Seq)
		}
		es = es[n:]
		if k != nil {
			if err := b.synced.Delete(k); err != nil {
				return err
			}
		}
		if err := b.writeSyncedBlocks(merged); err != nil {
			return err
		}
	}
	return nil
}

// mergeSynced merges two sequence-ordered lists, or returns nil if they
// share a sequence.
func mergeSynced(a, b []syncedEntry) []syncedEntry {
	out := make([]syncedEntry, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0].Seq < b[0].Seq:
			out, a = append(out, a[0]), a[1:]
		case a[0].Seq > b[0].Seq:
			out, b = append(out, b[0]), b[1:]
		default:
			return nil
		}
	}
	out = append(out, a...)
	return append(out, b...)
}

// writeSyncedBlocks writes es, in sequence order, as blocks of
// syncedBlockLen from its start.
func (b txBuckets) writeSyncedBlocks(es []syncedEntry) error {
	for len(es) > 0 {
		n := min(len(es), syncedBlockLen)
		if err := b.synced.Put(u64(es[0].Seq), encodeSyncedBlock(es[:n])); err != nil {
			return err
		}
		es = es[n:]
	}
	return nil
}

// forEachSyncedBlock calls fn with each block in sequence order until fn
// returns false. fn must not write to the bucket.
func (b txBuckets) forEachSyncedBlock(fn func(k []byte, es []syncedEntry) (bool, error)) error {
	c := b.synced.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		es, err := decodeSyncedBlock(k, v)
		if err != nil {
			return fmt.Errorf("synced block %x: %w", k, err)
		}
		more, err := fn(k, es)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// replaceSyncedBlock replaces the block stored under k by what is left
// of it, which holds no sequence outside the block's range.
func (b txBuckets) replaceSyncedBlock(k []byte, left []syncedEntry) error {
	if err := b.synced.Delete(k); err != nil {
		return err
	}
	if len(left) == 0 {
		return nil
	}
	b.synced.FillPercent = 1.0
	return b.synced.Put(u64(left[0].Seq), encodeSyncedBlock(left))
}
