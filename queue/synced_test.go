package queue

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	bolt "go.etcd.io/bbolt"
)

// TestSyncedBlocks puts synced movements into the blocks in random
// batches and orders (before, between, inside and after the blocks
// held), removes some as pruning does, and checks after each step that
// every sequence reads back as written, that none else reads, and that
// the blocks are well formed: each within syncedBlockLen, starting at
// its key, below the next block's key.
func TestSyncedBlocks(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "blocks.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bucketSynced); return err }); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	held := map[uint64]syncedEntry{}
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	entry := func(seq uint64) syncedEntry {
		e := syncedEntry{Seq: seq, StreamSeq: seq*3 + uint64(rnd.IntN(5)), At: base.Add(time.Duration(rnd.Int64N(1e12)))}
		e.Key[0], e.Key[15] = byte(seq), byte(seq>>8)
		e.Digest[31] = byte(seq * 7)
		e.Class = movement.Class(seq % 2)
		return e
	}
	check := func(step int) {
		t.Helper()
		err := db.View(func(tx *bolt.Tx) error {
			b := txBuckets{synced: tx.Bucket(bucketSynced)}
			var seen int
			var prevLast uint64
			err := b.forEachSyncedBlock(func(k []byte, es []syncedEntry) (bool, error) {
				if len(es) > syncedBlockLen || es[0].Seq != binary.BigEndian.Uint64(k) || (seen > 0 && es[0].Seq <= prevLast) {
					t.Fatalf("step %d: block %x of %d from %d, the one before ending at %d", step, k, len(es), es[0].Seq, prevLast)
				}
				for _, e := range es {
					if want, ok := held[e.Seq]; !ok || !sameSynced(want, e) {
						t.Fatalf("step %d: sequence %d reads %+v, want %+v (held %v)", step, e.Seq, e, want, ok)
					}
				}
				seen += len(es)
				prevLast = es[len(es)-1].Seq
				return true, nil
			})
			if err != nil {
				return err
			}
			if seen != len(held) {
				t.Fatalf("step %d: %d in blocks, %d held", step, seen, len(held))
			}
			r := b.syncedReader()
			for s := uint64(0); s < 3000; s++ {
				e, ok, err := r.get(s)
				if err != nil {
					return err
				}
				if want, held := held[s]; ok != held || (ok && !sameSynced(e, want)) {
					t.Fatalf("step %d: get(%d) = %+v %v, want %+v %v", step, s, e, ok, want, held)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for step := 0; step < 200; step++ {
		err := db.Update(func(tx *bolt.Tx) error {
			b := txBuckets{synced: tx.Bucket(bucketSynced)}
			if step%5 == 4 {
				// Remove a random share of one run of blocks, as Prune does.
				var rewrites [][2]any
				err := b.forEachSyncedBlock(func(k []byte, es []syncedEntry) (bool, error) {
					var left []syncedEntry
					for _, e := range es {
						if rnd.IntN(3) == 0 {
							delete(held, e.Seq)
						} else {
							left = append(left, e)
						}
					}
					rewrites = append(rewrites, [2]any{slices.Clone(k), left})
					return rnd.IntN(4) != 0, nil
				})
				if err != nil {
					return err
				}
				for _, rw := range rewrites {
					if err := b.replaceSyncedBlock(rw[0].([]byte), rw[1].([]syncedEntry)); err != nil {
						return err
					}
				}
				return nil
			}
			// A batch: mostly a run above everything, sometimes scattered.
			var es []syncedEntry
			n := 1 + rnd.IntN(80)
			start := uint64(rnd.IntN(2800))
			for i := 0; i < n; i++ {
				s := start + uint64(i)
				if step%3 == 0 {
					s = uint64(rnd.IntN(3000))
				}
				if _, dup := held[s]; dup || s == 0 {
					continue
				}
				e := entry(s)
				held[s] = e
				es = append(es, e)
			}
			rnd.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
			return b.putSynced(es)
		})
		if err != nil {
			t.Fatal(err)
		}
		check(step)
	}
	// Putting a sequence held again is refused, not merged.
	err = db.Update(func(tx *bolt.Tx) error {
		b := txBuckets{synced: tx.Bucket(bucketSynced)}
		for s := range held {
			if err := b.putSynced([]syncedEntry{entry(s)}); err == nil {
				t.Errorf("sequence %d put twice", s)
			}
			break
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSyncedBlockRefusesCorrupt: a block that does not decode exactly is
// an error, never a wrong movement.
func TestSyncedBlockRefusesCorrupt(t *testing.T) {
	es := []syncedEntry{{Seq: 10, StreamSeq: 5, At: time.Unix(0, 1)}, {Seq: 12, StreamSeq: 9, At: time.Unix(0, 1)}}
	good := encodeSyncedBlock(es)
	if got, err := decodeSyncedBlock(u64(10), good); err != nil || len(got) != 2 || got[1].Seq != 12 || got[1].StreamSeq != 9 {
		t.Fatalf("decode: %+v %v", got, err)
	}
	for name, v := range map[string][]byte{
		"empty":     {},
		"form":      append([]byte{9}, good[1:]...),
		"truncated": good[:len(good)-1],
		"trailing":  append(slices.Clone(good), 0),
		"count":     append([]byte{syncedBlockForm, 200}, good[2:]...),
	} {
		if _, err := decodeSyncedBlock(u64(10), v); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if _, err := decodeSyncedBlock([]byte{1, 2}, good); err == nil {
		t.Error("a short block key decoded")
	}
}

func sameSynced(a, b syncedEntry) bool {
	at := a.At.Equal(b.At)
	a.At, b.At = time.Time{}, time.Time{}
	return at && a == b
}

// TestKeyIndex puts, replaces and deletes keys in the grouped index, in
// random order, with keys chosen to fall in 256 of the groups so that
// groups hold about 16 members, and checks every read against a map,
// that iteration gives each key once, and that check finds a key moved
// into a group not its own.
func TestKeyIndex(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "keys.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bucketKeys); return err }); err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 16)
	rnd := rand.New(rand.NewPCG(3, 4))
	held := map[[16]byte][]byte{}
	var keys [][16]byte
	for len(keys) < 4000 {
		var k [16]byte
		binary.BigEndian.PutUint64(k[:], rnd.Uint64())
		binary.BigEndian.PutUint64(k[8:], rnd.Uint64())
		if (keyIndex{secret: secret}).group(k[:])[0] == 0 {
			keys = append(keys, k)
		}
	}
	for round := 0; round < 20; round++ {
		err := db.Update(func(tx *bolt.Tx) error {
			x := keyIndex{bk: tx.Bucket(bucketKeys), secret: secret}
			for i := 0; i < 500; i++ {
				k := keys[rnd.IntN(len(keys))]
				switch rnd.IntN(4) {
				case 0:
					delete(held, k)
					if err := x.Delete(k[:]); err != nil {
						return err
					}
				default:
					e := (&keyEntry{Seq: rnd.Uint64N(1 << 40)}).marshal()
					if rnd.IntN(3) == 0 {
						e = (&keyEntry{Long: true, State: Purged, Seq: 7, At: time.Unix(5, 0)}).marshal()
					}
					held[k] = e
					if err := x.Put(k[:], e); err != nil {
						return err
					}
				}
			}
			for _, k := range keys {
				v, err := x.Get(k[:])
				if err != nil {
					return err
				}
				if want := held[k]; !bytes.Equal(v, want) {
					t.Fatalf("round %d: key %x reads %x, want %x", round, k, v, want)
				}
			}
			seen := map[[16]byte]bool{}
			err := x.ForEach(func(k, v []byte) error {
				if seen[[16]byte(k)] || !bytes.Equal(held[[16]byte(k)], v) {
					t.Fatalf("round %d: key %x given twice or with %x", round, k, v)
				}
				seen[[16]byte(k)] = true
				return nil
			})
			if err != nil {
				return err
			}
			if len(seen) != len(held) {
				t.Fatalf("round %d: %d keys iterated, %d held", round, len(seen), len(held))
			}
			return x.check()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A key placed in another group is found by check, not silently lost.
	err = db.Update(func(tx *bolt.Tx) error {
		x := keyIndex{bk: tx.Bucket(bucketKeys), secret: secret}
		var k [16]byte
		for _, c := range keys {
			if held[c] != nil {
				k = c
				break
			}
		}
		g := x.group(k[:])
		other := []byte{g[0] ^ 1, g[1]}
		if err := x.Delete(k[:]); err != nil {
			return err
		}
		if err := x.bk.Put(other, encodeKeyGroup([]keyMember{{key: k[:], entry: shortEntry(1)}})); err != nil {
			return err
		}
		if err := x.check(); err == nil {
			t.Error("check passed a key in a group not its own")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string][]byte{
		"empty":     {},
		"short":     make([]byte, 10),
		"length":    append(make([]byte, 16), 200, 1),
		"zero":      append(make([]byte, 16), 0),
		"unordered": append(append(make([]byte, 15), 2, 1, 0x10), append(make([]byte, 15), 1, 1, 0x10)...),
	} {
		if _, err := decodeKeyGroup(v); err == nil {
			t.Errorf("%s: a corrupt group decoded", name)
		}
	}
}
