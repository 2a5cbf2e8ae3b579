package queue

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The upgrade from schema 2 to schema 3 changes the layout of the keys,
// pending and quarantine buckets and replaces the synced_at bucket with
// the synced bucket (see the package documentation). It rewrites every
// key, so a large file is converted in transactions of at most
// migrateChunk keys, in key order, each committed with the last key it
// converted (meta "migrating"); a start after a crash continues after
// that key. The opening transaction starts it (startLayoutMigration) and
// sets the schema to 3 at once, so an older agent refuses the file from
// the first converted key on; the last transaction removes the marker.
// Until then the file is only opened for writing, by Open, which finishes
// the conversion before anything else reads it. Each conversion of a key
// recognises an entry or record already in the new form and leaves it,
// so converting a key twice changes nothing.

var (
	metaMigrating    = []byte("migrating")
	bucketSyncedAtV2 = []byte("synced_at")
)

// migrateChunk is the number of keys converted per transaction;
// migrateAfterChunk, when set, is called after each chunk's commit (tests
// stop the conversion there).
var (
	migrateChunk      = 20000
	migrateAfterChunk func(chunks int) error
)

// startLayoutMigration marks the file as being converted to schema 3.
func startLayoutMigration(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if err := meta.Put(metaMigrating, []byte{}); err != nil {
		return err
	}
	return meta.Put(metaSchema, u64(3))
}

// migrateLayout converts, chunk by chunk, a file marked by
// startLayoutMigration; it does nothing to a file that is not. progress,
// when set, is called after each chunk; after, when set, is called after
// each chunk's commit with the number of chunks committed (tests stop it
// there).
func migrateLayout(db *bolt.DB, progress func(done, total int64), chunk int, after func(int) error) error {
	var total, done int64
	marked := false
	err := db.View(func(tx *bolt.Tx) error {
		marked = tx.Bucket(bucketMeta).Get(metaMigrating) != nil
		if marked && progress != nil {
			total = int64(tx.Bucket(bucketKeys).Stats().KeyN)
		}
		return nil
	})
	if err != nil || !marked {
		return err
	}
	if progress != nil {
		progress(0, total)
	}
	for chunks := 1; ; chunks++ {
		finished := false
		var n int
		err := db.Update(func(tx *bolt.Tx) error {
			var err error
			n, finished, err = migrateChunkTx(tx, chunk)
			return err
		})
		if err != nil {
			return fmt.Errorf("queue: migrate schema 2 to 3: %w", classify(err))
		}
		done += int64(n)
		if progress != nil {
			progress(min(done, total), total)
		}
		if finished {
			return nil
		}
		if after != nil {
			if err := after(chunks); err != nil {
				return err
			}
		}
	}
}

// migrateChunkTx converts up to chunk keys after the marker and moves the
// marker past them; when none is left it finishes the upgrade.
func migrateChunkTx(tx *bolt.Tx, chunk int) (int, bool, error) {
	b := buckets(tx)
	marker := b.meta.Get(metaMigrating)
	if marker == nil {
		return 0, true, nil
	}
	type kv struct{ k, v []byte }
	var todo []kv
	c := b.keys.Cursor()
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
	for _, e := range todo {
		if err := convertKey(b, e.k, e.v); err != nil {
			return 0, false, fmt.Errorf("key %x: %w", e.k, err)
		}
	}
	if len(todo) == chunk {
		return len(todo), false, b.meta.Put(metaMigrating, todo[len(todo)-1].k)
	}
	// Every key is converted: the pruning index of schema 2 goes, and
	// with it the time of the last acknowledgement, which is kept.
	if old := tx.Bucket(bucketSyncedAtV2); old != nil {
		if k, _ := old.Cursor().Last(); len(k) >= 8 {
			if err := b.meta.Put(metaLastSynced, k[:8]); err != nil {
				return 0, false, err
			}
		}
		if err := tx.DeleteBucket(bucketSyncedAtV2); err != nil {
			return 0, false, err
		}
	}
	return len(todo), true, b.meta.Delete(metaMigrating)
}

// convertKey converts one key of schema 2 and the record or synced state
// it names.
func convertKey(b txBuckets, k, v []byte) error {
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
		return b.keys.Put(k, ne.marshal())
	case Synced:
		se := syncedEntry{Key: [16]byte(k), Digest: e.Digest, Class: e.Class, StreamSeq: e.StreamSeq, At: e.At}
		if err := b.synced.Put(u64(e.Seq), se.marshal()); err != nil {
			return err
		}
		return b.keys.Put(k, shortEntry(e.Seq))
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
		return b.keys.Put(k, ne.marshal())
	case Purged:
		ne := keyEntry{Long: true, State: Purged, Class: e.Class, Seq: e.Seq, At: e.At, Digest: e.Digest}
		return b.keys.Put(k, ne.marshal())
	}
	return fmt.Errorf("unknown state %d", e.State)
}
