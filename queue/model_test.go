package queue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/rxedge/agent/movement"
)

// TestModel runs random sequences of every state-changing operation, with
// close-and-reopen, pruning and the upgrade of the file from the schema 2
// layout in between, against a simple model of what each key's state must
// be. After every step the counters must equal a full scan (Verify) and
// every key must be in the state the model says, with its sequence,
// class, digest, central sequence, the time it entered its state and its
// record; LookupSeqs must say the same of every sequence given.
func TestModel(t *testing.T) {
	dir := t.TempDir()
	var run int
	rapid.Check(t, func(rt *rapid.T) {
		run++
		path := filepath.Join(dir, fmt.Sprintf("model-%d.db", run))
		clk := newClock()
		q, err := Open(Options{Path: path, StoreID: testStore, Clock: clk.Now, MaxGroup: 8})
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { q.Close() }()

		type mstate struct {
			state   State
			variant int
			class   movement.Class
			at      time.Time // when it entered its state
			stream  uint64    // central's sequence, when synced
		}
		var lastSynced time.Time
		given := map[uint64]string{}      // every sequence given → movement id
		model := make(map[string]*mstate) // movement id → state
		leased := make(map[uint64]string) // seq → movement id
		seqOf := make(map[string]uint64)
		ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		prep := func(id string, variant int, class movement.Class) movement.Prepared {
			sched := ""
			if class == movement.Controlled {
				sched = "CII"
			}
			return mv(rt, id, variant, sched)
		}
		pickLeased := func(rt *rapid.T) []uint64 {
			var all []uint64
			for s := range leased {
				all = append(all, s)
			}
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			if len(all) == 0 {
				return nil
			}
			n := rapid.IntRange(1, len(all)).Draw(rt, "n")
			return all[:n]
		}
		inState := func(s State) []string {
			var out []string
			for _, id := range ids {
				if m := model[id]; m != nil && m.state == s {
					out = append(out, id)
				}
			}
			return out
		}
		// reopen closes the file, rewrites it as an older schema held it
		// when downgrade is set, and opens it again, which upgrades it.
		reopen := func(rt *rapid.T, downgrade func(fataler, string)) {
			if err := q.Close(); err != nil {
				rt.Fatal(err)
			}
			if downgrade != nil {
				downgrade(rt, path)
			}
			q, err = Open(Options{Path: path, StoreID: testStore, Clock: clk.Now, MaxGroup: 8})
			if err != nil {
				rt.Fatal(err)
			}
			clear(leased)
		}

		rt.Repeat(map[string]func(*rapid.T){
			"enqueue": func(rt *rapid.T) {
				n := rapid.IntRange(1, 3).Draw(rt, "items")
				var items []movement.Prepared
				var mids []string
				var variants []int
				for i := 0; i < n; i++ {
					id := rapid.SampledFrom(ids).Draw(rt, "id")
					v := rapid.IntRange(0, 1).Draw(rt, "variant")
					class := movement.Ordinary
					if id >= "e" {
						class = movement.Controlled
					}
					items = append(items, prep(id, v, class))
					mids = append(mids, id)
					variants = append(variants, v)
				}
				// What the model expects.
				seen := map[string]int{}
				wantErr := false
				for i, id := range mids {
					if v, ok := seen[id]; ok {
						if v != variants[i] {
							wantErr = true
						}
						continue
					}
					if m := model[id]; m != nil && (m.state == Purged || m.variant != variants[i]) {
						wantErr = true
					}
					seen[id] = variants[i]
				}
				res, err := q.Enqueue(items)
				var ce *ConflictError
				var pe *PurgedError
				if wantErr != (errors.As(err, &ce) || errors.As(err, &pe)) {
					rt.Fatalf("enqueue %v %v: err %v, model expects error %v", mids, variants, err, wantErr)
				}
				if err != nil {
					return
				}
				for i, id := range mids {
					if model[id] == nil {
						model[id] = &mstate{state: Pending, variant: variants[i], class: items[i].Class, at: clk.Now()}
						seqOf[id] = res[i].Seq
						given[res[i].Seq] = id
						if res[i].Duplicate {
							rt.Fatalf("new movement %s reported duplicate", id)
						}
					} else if res[i].Seq != seqOf[id] {
						rt.Fatalf("movement %s: seq %d, first had %d", id, res[i].Seq, seqOf[id])
					}
				}
			},
			"enqueueEach": func(rt *rapid.T) {
				n := rapid.IntRange(1, 4).Draw(rt, "items")
				var items []movement.Prepared
				var mids []string
				var variants []int
				for i := 0; i < n; i++ {
					id := rapid.SampledFrom(ids).Draw(rt, "id")
					v := rapid.IntRange(0, 1).Draw(rt, "variant")
					class := movement.Ordinary
					if id >= "e" {
						class = movement.Controlled
					}
					items = append(items, prep(id, v, class))
					mids = append(mids, id)
					variants = append(variants, v)
				}
				commits := q.Commits()
				res, err := q.EnqueueEach(items)
				if err != nil {
					rt.Fatalf("enqueue each %v %v: %v", mids, variants, err)
				}
				if q.Commits() != commits+1 {
					rt.Fatalf("enqueue each took %d commits", q.Commits()-commits)
				}
				first := map[string]int{} // id → the item that stored it
				for i, id := range mids {
					r := res[i]
					var ce *ConflictError
					var pe *PurgedError
					if j, ok := first[id]; ok {
						if variants[j] != variants[i] {
							if !errors.As(r.Err, &ce) || ce.Index != i || ce.Other != j || ce.State != 0 {
								rt.Fatalf("item %d (%s): %+v, want a conflict with item %d", i, id, r, j)
							}
						} else if r.Err != nil || !r.Duplicate || r.Seq != res[j].Seq {
							rt.Fatalf("item %d (%s): %+v, want a duplicate of item %d (%+v)", i, id, r, j, res[j])
						}
						continue
					}
					if m := model[id]; m != nil {
						switch {
						case m.state == Purged:
							if !errors.As(r.Err, &pe) || pe.Index != i {
								rt.Fatalf("item %d (%s): %+v, want purged", i, id, r)
							}
						case m.variant != variants[i]:
							if !errors.As(r.Err, &ce) || ce.Index != i || ce.State != m.state {
								rt.Fatalf("item %d (%s): %+v, want a conflict with the %s movement", i, id, r, m.state)
							}
						default:
							if r.Err != nil || !r.Duplicate || r.Seq != seqOf[id] {
								rt.Fatalf("item %d (%s): %+v, want a duplicate of seq %d", i, id, r, seqOf[id])
							}
						}
						continue
					}
					if r.Err != nil || r.Duplicate || r.Seq == 0 {
						rt.Fatalf("item %d (%s): %+v, want stored", i, id, r)
					}
					model[id] = &mstate{state: Pending, variant: variants[i], class: items[i].Class, at: clk.Now()}
					seqOf[id] = r.Seq
					given[r.Seq] = id
					first[id] = i
				}
			},
			"lease": func(rt *rapid.T) {
				l, err := q.Lease(clk.Now(), rapid.IntRange(1, 5).Draw(rt, "max"))
				if err != nil {
					rt.Fatal(err)
				}
				for _, r := range l {
					if _, dup := leased[r.Seq]; dup {
						rt.Fatalf("seq %d leased twice", r.Seq)
					}
					if model[r.MovementID].state != Pending {
						rt.Fatalf("leased %s in state %s", r.MovementID, model[r.MovementID].state)
					}
					leased[r.Seq] = r.MovementID
				}
			},
			"synced": func(rt *rapid.T) {
				var acks []Ack
				for _, s := range pickLeased(rt) {
					acks = append(acks, Ack{Seq: s, StreamSeq: s + 1000})
					m := model[leased[s]]
					m.state, m.at, m.stream = Synced, clk.Now(), s+1000
					delete(leased, s)
				}
				if err := q.MarkSynced(acks); err != nil {
					rt.Fatal(err)
				}
				if len(acks) > 0 {
					lastSynced = clk.Now()
				}
			},
			"retry": func(rt *rapid.T) {
				var rs []RetryAt
				for _, s := range pickLeased(rt) {
					rs = append(rs, RetryAt{Seq: s, Failure: Failure{Kind: "transient:timeout"}, Delay: time.Duration(rapid.IntRange(0, 30).Draw(rt, "delay")) * time.Second})
					delete(leased, s)
				}
				if err := q.Retry(rs); err != nil {
					rt.Fatal(err)
				}
			},
			"quarantine": func(rt *rapid.T) {
				var qs []QuarantineAt
				for _, s := range pickLeased(rt) {
					qs = append(qs, QuarantineAt{Seq: s, Reason: "permanent:too_large", Charge: true})
					model[leased[s]].state, model[leased[s]].at = Quarantined, clk.Now()
					delete(leased, s)
				}
				if err := q.Quarantine(qs); err != nil {
					rt.Fatal(err)
				}
			},
			"release": func(rt *rapid.T) {
				for _, s := range pickLeased(rt) {
					q.Release(s)
					delete(leased, s)
				}
			},
			"redrive": func(rt *rapid.T) {
				cands := append(inState(Quarantined), inState(Synced)...)
				if len(cands) == 0 {
					return
				}
				id := rapid.SampledFrom(cands).Draw(rt, "redrive")
				m := model[id]
				res, err := q.Redrive(Redrive{Keys: [][16]byte{movement.Key(testStore, id)}, Actor: "model", Reason: "test",
					Spread: time.Duration(rapid.IntRange(0, 2).Draw(rt, "spread")) * time.Minute, Rand: func() float64 { return 0.5 }})
				if err != nil {
					rt.Fatal(err)
				}
				if (m.state == Quarantined) != (len(res.Redriven) == 1) {
					rt.Fatalf("redrive of %s in %s: %+v", id, m.state, res)
				}
				if m.state == Quarantined {
					m.state, m.at = Pending, clk.Now()
				}
			},
			"purge": func(rt *rapid.T) {
				cands := inState(Quarantined)
				if len(cands) == 0 {
					return
				}
				id := rapid.SampledFrom(cands).Draw(rt, "purge")
				res, err := q.Purge(Purge{Keys: [][16]byte{movement.Key(testStore, id)}, Actor: "model", Reason: "test"})
				if err != nil || len(res.Purged) != 1 {
					rt.Fatalf("purge %s: %+v %v", id, res, err)
				}
				model[id].state, model[id].at = Purged, clk.Now()
			},
			"settle": func(rt *rapid.T) {
				// One settlement of each kind of outcome, with an
				// acknowledgement of a pending movement no lease holds
				// (given back, or never leased): what it needs is read
				// from the file, not from the lease.
				var st Settlement
				for _, s := range pickLeased(rt) {
					m := model[leased[s]]
					switch rapid.IntRange(0, 2).Draw(rt, "outcome") {
					case 0:
						st.Acks = append(st.Acks, Ack{Seq: s, StreamSeq: s + 2000})
						m.state, m.at, m.stream = Synced, clk.Now(), s+2000
					case 1:
						st.Retries = append(st.Retries, RetryAt{Seq: s, Failure: Failure{Kind: "transient:timeout"}, Delay: time.Second})
					default:
						st.Quarantines = append(st.Quarantines, QuarantineAt{Seq: s, Reason: "exhausted:timeout"})
						m.state, m.at = Quarantined, clk.Now()
					}
					delete(leased, s)
				}
				for _, id := range inState(Pending) {
					if _, ok := leased[seqOf[id]]; ok || !rapid.Bool().Draw(rt, "ack unleased "+id) {
						continue
					}
					st.Acks = append(st.Acks, Ack{Seq: seqOf[id], StreamSeq: seqOf[id] + 3000})
					m := model[id]
					m.state, m.at, m.stream = Synced, clk.Now(), seqOf[id]+3000
				}
				if err := q.Settle(st); err != nil {
					rt.Fatal(err)
				}
				if len(st.Acks) > 0 {
					lastSynced = clk.Now()
				}
			},
			"prune": func(rt *rapid.T) {
				horizon := time.Duration(rapid.IntRange(1, 120).Draw(rt, "horizon")) * time.Second
				n, err := q.Prune(horizon, 0, 100)
				if err != nil {
					rt.Fatal(err)
				}
				want := 0
				for id, m := range model {
					if m.state == Synced && m.at.Before(clk.Now().Add(-horizon)) {
						delete(model, id)
						delete(seqOf, id)
						want++
					}
				}
				if n != want {
					rt.Fatalf("pruned %d, model %d", n, want)
				}
			},
			"upgrade": func(rt *rapid.T) {
				// The file as schema 2 would have held this state,
				// upgraded by the next open.
				reopen(rt, downgradeV2)
				// Schema 2 kept the time of the newest synced key held.
				lastSynced = time.Time{}
				for _, m := range model {
					if m.state == Synced && m.at.After(lastSynced) {
						lastSynced = m.at
					}
				}
			},
			"upgrade3": func(rt *rapid.T) {
				// The file as schema 3 would have held this state (one
				// synced entry per sequence, one key entry per key),
				// upgraded by the next open.
				reopen(rt, downgradeV3)
			},
			"tick": func(rt *rapid.T) {
				clk.Add(time.Duration(rapid.IntRange(1, 40).Draw(rt, "seconds")) * time.Second)
			},
			"reopen": func(rt *rapid.T) { reopen(rt, nil) },
			"": func(rt *rapid.T) {
				if err := q.Verify(); err != nil {
					rt.Fatal(err)
				}
				s, err := q.Stats()
				if err != nil {
					rt.Fatal(err)
				}
				want := map[State]uint64{}
				for id, m := range model {
					want[m.state]++
					e, err := q.Get(movement.Key(testStore, id))
					if err != nil || e.State != m.state {
						rt.Fatalf("key of %s: state %v (%v), model says %s", id, e.State, err, m.state)
					}
					digest := prep(id, m.variant, m.class).Digest
					if e.Seq != seqOf[id] || e.Class != m.class || !e.At.Equal(m.at) || e.Digest != digest {
						rt.Fatalf("key of %s: seq %d class %v at %v digest %x, model says seq %d class %v at %v digest %x", id, e.Seq, e.Class, e.At, e.Digest[:4], seqOf[id], m.class, m.at, digest[:4])
					}
					if m.state == Synced && e.StreamSeq != m.stream || m.state != Synced && e.StreamSeq != 0 {
						rt.Fatalf("key of %s (%s): stream sequence %d, model %d", id, m.state, e.StreamSeq, m.stream)
					}
					held := m.state == Pending || m.state == Quarantined
					if held != (e.Record != nil) || held && (e.Record.MovementID != id || e.Record.Seq != e.Seq || e.Record.Digest != digest || e.Record.Key != e.Key) {
						rt.Fatalf("key of %s (%s): record %+v", id, m.state, e.Record)
					}
				}
				var seqs []uint64
				for s := range given {
					seqs = append(seqs, s)
				}
				lk, err := q.LookupSeqs(seqs)
				if err != nil {
					rt.Fatal(err)
				}
				for _, st := range lk.States {
					id := given[st.Seq]
					m := model[id]
					if m == nil || seqOf[id] != st.Seq {
						if st.State != 0 {
							rt.Fatalf("sequence %d (%s, pruned): %+v", st.Seq, id, st)
						}
						continue
					}
					if st.State != m.state || st.Key != movement.Key(testStore, id) || m.state == Synced && (st.StreamSeq != m.stream || !st.At.Equal(m.at)) {
						rt.Fatalf("sequence %d (%s): %+v, model %+v", st.Seq, id, st, *m)
					}
				}
				if at, err := q.LastSyncedAt(); err != nil || !at.Equal(lastSynced) {
					rt.Fatalf("LastSyncedAt %v (%v), model %v", at, err, lastSynced)
				}
				for _, st := range States {
					if s.Count(st) != want[st] {
						rt.Fatalf("%s count %d, model %d", st, s.Count(st), want[st])
					}
				}
				if q.Leased() != len(leased) {
					rt.Fatalf("%d leased, model %d", q.Leased(), len(leased))
				}
			},
		})
	})
}

// downgradeV3 rewrites the file at path in the layout of schema 3: one
// synced entry per sequence instead of blocks.
func downgradeV3(t fataler, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := buckets(tx)
		old, err := tx.CreateBucket(bucketSyncedV3)
		if err != nil {
			return err
		}
		err = b.forEachSyncedBlock(func(_ []byte, es []syncedEntry) (bool, error) {
			for _, e := range es {
				if err := old.Put(u64(e.Seq), marshalV3Synced(e)); err != nil {
					return false, err
				}
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketSynced); err != nil {
			return err
		}
		perKey, err := tx.CreateBucket(bucketKeysV3)
		if err != nil {
			return err
		}
		if err := ungroupKeys(tx, perKey); err != nil {
			return err
		}
		return b.meta.Put(metaSchema, u64(3))
	})
	if err != nil {
		t.Fatalf("downgrade: %v", err)
	}
}

// ungroupKeys copies the key index into perKey, one entry per key as
// schema 3 kept them (unless perKey is nil), and removes the index and
// its secret.
func ungroupKeys(tx *bolt.Tx, perKey *bolt.Bucket) error {
	b := buckets(tx)
	if perKey != nil {
		err := b.keys.ForEach(func(k, v []byte) error { return perKey.Put(bytes.Clone(k), bytes.Clone(v)) })
		if err != nil {
			return err
		}
	}
	if err := tx.DeleteBucket(bucketKeys); err != nil {
		return err
	}
	return b.meta.Delete(metaKeySecret)
}

// downgradeV2 rewrites the file at path in the layout of schema 2 (the
// keys bucket holding every key's state, records with their sequence, the
// synced_at pruning index), as the queue of schema 2 would have left the
// same state.
func downgradeV2(t fataler, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := buckets(tx)
		syncedAt, err := tx.CreateBucket(bucketSyncedAtV2)
		if err != nil {
			return err
		}
		type kv struct{ k, v []byte }
		var keys []kv
		err = b.keys.ForEach(func(k, v []byte) error {
			e, err := unmarshalKeyEntry(v)
			if err != nil {
				return err
			}
			en, err := b.resolve(k, e, false)
			if err != nil {
				return err
			}
			old := make([]byte, 0, v1KeyEntryLen)
			old = append(old, byte(en.State), byte(en.Class))
			old = binary.BigEndian.AppendUint64(old, en.Seq)
			old = binary.BigEndian.AppendUint64(old, en.StreamSeq)
			old = binary.BigEndian.AppendUint64(old, uint64(en.At.UnixNano()))
			old = append(old, en.Digest[:]...)
			keys = append(keys, kv{bytes.Clone(k), old})
			if en.State == Synced {
				tk := binary.BigEndian.AppendUint64(nil, uint64(en.At.UnixNano()))
				return syncedAt.Put(append(tk, k...), nil)
			}
			return nil
		})
		if err != nil {
			return err
		}
		perKey, err := tx.CreateBucket(bucketKeysV3)
		if err != nil {
			return err
		}
		for _, e := range keys {
			if err := perKey.Put(e.k, e.v); err != nil {
				return err
			}
		}
		if err := ungroupKeys(tx, nil); err != nil {
			return err
		}
		// Records: the sequence goes back to the head, fixed-width.
		for _, bk := range []*bolt.Bucket{b.pending, b.quarantine} {
			var recs []kv
			bk.ForEach(func(k, v []byte) error {
				r, err := unmarshalRecord(k, v)
				if err != nil {
					return err
				}
				rest := v[recFixedLen:]
				if v[0] == recordHeld {
					_, n := binary.Uvarint(rest)
					rest = rest[n:]
				}
				old := []byte{recordV1}
				old = binary.BigEndian.AppendUint64(old, r.Seq)
				old = append(old, v[recKeyAt:recFixedLen]...)
				recs = append(recs, kv{bytes.Clone(k), append(old, rest...)})
				return nil
			})
			for _, e := range recs {
				if err := bk.Put(e.k, e.v); err != nil {
					return err
				}
			}
		}
		if err := tx.DeleteBucket(bucketSynced); err != nil {
			return err
		}
		if err := b.meta.Delete(metaLastSynced); err != nil {
			return err
		}
		return b.meta.Put(metaSchema, u64(2))
	})
	if err != nil {
		t.Fatalf("downgrade: %v", err)
	}
}
