package queue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

// The layout upgrades, to schema 4, run in phases, each in transactions
// of a bounded size, resumed after a crash:
//
//   - From schema 2, the keys phase changes the layout of the keys,
//     pending and quarantine buckets and replaces the synced_at bucket
//     with schema 3's synced bucket (one entry per sequence). It rewrites
//     every key of schema 3's keys bucket in place, in key order, at most
//     migrateChunk a transaction, each committed with the last key it
//     converted (meta "migrating"); a start after a crash continues after
//     that key. Each conversion of a key recognises an entry or record
//     already in the new form and leaves it, so converting a key twice
//     changes nothing.
//   - From schema 3 (and after the keys phase), the packing phase moves
//     schema 3's synced entries into blocks (synced.go), and the grouping
//     phase moves schema 3's keys into the key index's groups
//     (keyindex.go), each in order, at most migrateChunk a transaction,
//     deleting what it moved (meta "repacking", "regrouping" while any is
//     left); what is left is where a start after a crash continues.
//
// The opening transaction starts them (startLayoutMigration) and sets the
// schema to 4 at once, so an older agent refuses the file from the first
// transaction on; the last transaction of each phase removes its marker.
// Until then the file is only opened for writing, by Open, which finishes
// the upgrade before anything else reads it.

var (
	metaMigrating    = []byte("migrating")
	metaRepacking    = []byte("repacking")
	metaRegrouping   = []byte("regrouping")
	bucketSyncedAtV2 = []byte("synced_at")
	bucketSyncedV3   = []byte("synced")
)

// migrateChunk is the number of keys or synced entries converted per
// transaction; migrateAfterChunk, when set, is called after each chunk's
// commit (tests stop the conversion there).
var (
	migrateChunk      = 20000
	migrateAfterChunk func(chunks int) error
)

// startLayoutMigration marks the file, of schema from (2 or 3), as being
// upgraded to schema 4.
func startLayoutMigration(tx *bolt.Tx, from uint64) error {
	meta := tx.Bucket(bucketMeta)
	for _, name := range [][]byte{bucketKeysV3, bucketSyncedV3} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	if err := newKeySecret(meta); err != nil {
		return err
	}
	if from == 2 {
		if err := meta.Put(metaMigrating, []byte{}); err != nil {
			return err
		}
	}
	for _, m := range [][]byte{metaRepacking, metaRegrouping} {
		if err := meta.Put(m, []byte{}); err != nil {
			return err
		}
	}
	return meta.Put(metaSchema, u64(4))
}

// layoutMigrating says whether the file is being upgraded.
func layoutMigrating(meta *bolt.Bucket) bool {
	return meta.Get(metaMigrating) != nil || meta.Get(metaRepacking) != nil || meta.Get(metaRegrouping) != nil
}

// migratePhase is one phase of the upgrade: its marker, the bucket whose
// entries it converts, and one transaction of it, which returns how many
// it converted.
type migratePhase struct {
	marker, input []byte
	chunk         func(tx *bolt.Tx, n int) (int, error)
}

var migratePhases = []migratePhase{
	{metaMigrating, bucketKeysV3, migrateChunkTx},
	{metaRepacking, bucketSyncedV3, repackChunkTx},
	{metaRegrouping, bucketKeysV3, regroupChunkTx},
}

// migrateLayout upgrades, chunk by chunk, a file marked by
// startLayoutMigration; it does nothing to a file that is not. progress,
// when set, is called after each chunk with the entries converted and
// the number known to convert (each phase adds its own when it starts);
// after, when set, is called after each chunk's commit with the number
// of chunks committed (tests stop it there).
func migrateLayout(db *bolt.DB, progress func(done, total int64), chunk int, after func(int) error) error {
	var total, done int64
	chunks := 0
	for _, ph := range migratePhases {
		started := false
		for {
			finished := false
			var n int
			err := db.Update(func(tx *bolt.Tx) error {
				if tx.Bucket(bucketMeta).Get(ph.marker) == nil {
					finished = true
					return nil
				}
				if !started {
					started = true
					if in := tx.Bucket(ph.input); in != nil {
						total += int64(in.Stats().KeyN)
					}
					if progress != nil {
						progress(done, total)
					}
				}
				var err error
				n, err = ph.chunk(tx, chunk)
				return err
			})
			if err != nil {
				return fmt.Errorf("queue: upgrade the data file to schema %d: %w", SchemaVersion, classify(err))
			}
			if finished {
				break
			}
			done += int64(n)
			if progress != nil {
				progress(min(done, total), total)
			}
			chunks++
			if after != nil {
				if err := after(chunks); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// regroupChunkTx moves up to chunk of schema 3's keys, in key order,
// into the key index's groups; when none is left it removes the old
// bucket and the marker.
func regroupChunkTx(tx *bolt.Tx, chunk int) (int, error) {
	b := buckets(tx)
	old := tx.Bucket(bucketKeysV3)
	type kv struct{ k, v []byte }
	var todo []kv
	if old != nil {
		c := old.Cursor()
		for k, v := c.First(); k != nil && len(todo) < chunk; k, v = c.Next() {
			todo = append(todo, kv{bytes.Clone(k), bytes.Clone(v)})
		}
	}
	if len(todo) == 0 {
		if old != nil {
			if err := tx.DeleteBucket(bucketKeysV3); err != nil {
				return 0, err
			}
		}
		return 0, b.meta.Delete(metaRegrouping)
	}
	for _, e := range todo {
		if _, err := unmarshalKeyEntry(e.v); err != nil {
			return 0, fmt.Errorf("key %x: %w", e.k, err)
		}
		if err := b.keys.Put(e.k, e.v); err != nil {
			return 0, err
		}
		if err := old.Delete(e.k); err != nil {
			return 0, err
		}
	}
	return len(todo), nil
}

// repackChunkTx moves up to chunk of schema 3's synced entries, the
// lowest sequences first, into blocks; when none is left it removes the
// old bucket and the marker.
func repackChunkTx(tx *bolt.Tx, chunk int) (int, error) {
	b := buckets(tx)
	old := tx.Bucket(bucketSyncedV3)
	var es []syncedEntry
	if old != nil {
		c := old.Cursor()
		for k, v := c.First(); k != nil && len(es) < chunk; k, v = c.Next() {
			e, err := unmarshalV3Synced(k, v)
			if err != nil {
				return 0, fmt.Errorf("synced sequence %x: %w", k, err)
			}
			es = append(es, e)
		}
	}
	if len(es) == 0 {
		if old != nil {
			if err := tx.DeleteBucket(bucketSyncedV3); err != nil {
				return 0, err
			}
		}
		return 0, b.meta.Delete(metaRepacking)
	}
	if err := b.putSynced(es); err != nil {
		return 0, err
	}
	for _, e := range es {
		if err := old.Delete(u64(e.Seq)); err != nil {
			return 0, err
		}
	}
	return len(es), nil
}

// migrateChunkTx converts up to chunk keys after the marker and moves the
// marker past them; when none is left it finishes the upgrade.
func migrateChunkTx(tx *bolt.Tx, chunk int) (int, error) {
	b := buckets(tx)
	marker := b.meta.Get(metaMigrating)
	type kv struct{ k, v []byte }
	var todo []kv
	keys := tx.Bucket(bucketKeysV3)
	c := keys.Cursor()
	k, v := c.First()
	if len(marker) > 0 {
		k, v = c.Seek(marker)
		if k != nil && bytes.Equal(k, marker) {
			k, v = c.Next()
		}
	}
	for ; k != nil && len(todo) < chunk; k, v = c.Next() {
		todo = append(todo, kv{bytes.Clone(k), bytes.Clone(v)})
	}
	old := tx.Bucket(bucketSyncedV3)
	for _, e := range todo {
		if err := convertKey(b, keys, old, e.k, e.v); err != nil {
			return 0, fmt.Errorf("key %x: %w", e.k, err)
		}
	}
	if len(todo) == chunk {
		return len(todo), b.meta.Put(metaMigrating, todo[len(todo)-1].k)
	}
	// Every key is converted: the pruning index of schema 2 goes, and
	// with it the time of the last acknowledgement, which is kept.
	if old := tx.Bucket(bucketSyncedAtV2); old != nil {
		if k, _ := old.Cursor().Last(); len(k) >= 8 {
			if err := b.meta.Put(metaLastSynced, k[:8]); err != nil {
				return 0, err
			}
		}
		if err := tx.DeleteBucket(bucketSyncedAtV2); err != nil {
			return 0, err
		}
	}
	return len(todo), b.meta.Delete(metaMigrating)
}

// convertKey converts one key of schema 2 and the record or synced state
// it names.
func convertKey(b txBuckets, keys, old *bolt.Bucket, k, v []byte) error {
	if len(v) > 0 && (v[0] == entryShort || v[0] == entryLong) {
		return nil // converted already
	}
	e, err := unmarshalV1KeyEntry(v)
	if err != nil {
		return err
	}
	switch e.State {
	case Pending:
		sk := u64(e.Seq)
		rv := b.pending.Get(sk)
		if rv == nil {
			return fmt.Errorf("pending sequence %d has no record", e.Seq)
		}
		r, err := unmarshalRecord(sk, rv)
		if err != nil {
			return err
		}
		if !bytes.Equal(r.Key[:], k) || r.Seq != e.Seq {
			return fmt.Errorf("sequence %d holds key %x's record", e.Seq, r.Key)
		}
		if rv[0] == recordV1 {
			if err := b.pending.Put(sk, r.marshal(false)); err != nil {
				return err
			}
		}
		ne := keyEntry{Seq: e.Seq}
		if !e.At.Equal(r.EnqueuedAt) {
			// Pending since a redrive: the entry keeps when.
			ne = keyEntry{Long: true, State: Pending, Class: e.Class, Seq: e.Seq, At: e.At}
		}
		return keys.Put(k, ne.marshal())
	case Synced:
		se := syncedEntry{Key: [16]byte(k), Digest: e.Digest, Class: e.Class, StreamSeq: e.StreamSeq, At: e.At}
		if err := old.Put(u64(e.Seq), marshalV3Synced(se)); err != nil {
			return err
		}
		return keys.Put(k, shortEntry(e.Seq))
	case Quarantined:
		rv := b.quarantine.Get(k)
		if rv == nil {
			return fmt.Errorf("quarantined key has no record")
		}
		r, err := unmarshalRecord(k, rv)
		if err != nil {
			return err
		}
		if rv[0] == recordV1 {
			if err := b.quarantine.Put(k, r.marshal(true)); err != nil {
				return err
			}
		}
		ne := keyEntry{Long: true, State: Quarantined, Class: e.Class, Seq: e.Seq, At: e.At}
		return keys.Put(k, ne.marshal())
	case Purged:
		ne := keyEntry{Long: true, State: Purged, Class: e.Class, Seq: e.Seq, At: e.At, Digest: e.Digest}
		return keys.Put(k, ne.marshal())
	}
	return fmt.Errorf("unknown state %d", e.State)
}

// The synced bucket of schema 3 (bucketSyncedV3) held one entry per
// synced movement, keyed by its sequence; the upgrade to schema 4 packs
// them into blocks (synced.go).

// marshalV3Synced encodes e as schema 3 did (the sequence is the key).
func marshalV3Synced(e syncedEntry) []byte {
	b := make([]byte, 0, 16+32+1+10+10)
	b = append(b, e.Key[:]...)
	b = append(b, e.Digest[:]...)
	b = append(b, byte(e.Class))
	b = binary.AppendUvarint(b, e.StreamSeq)
	return binary.AppendVarint(b, e.At.UnixNano())
}

func unmarshalV3Synced(k, b []byte) (syncedEntry, error) {
	var e syncedEntry
	if len(k) != 8 {
		return e, errCorrupt
	}
	e.Seq = binary.BigEndian.Uint64(k)
	d := decoder{b: b}
	copy(e.Key[:], d.bytes(16))
	copy(e.Digest[:], d.bytes(32))
	e.Class = movement.Class(d.byte())
	e.StreamSeq = d.uvarint()
	e.At = time.Unix(0, d.varint())
	if d.err || len(d.b) != 0 {
		return e, errCorrupt
	}
	return e, nil
}
