package queue

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/rxedge/agent/movement"
)

// TestModel runs random sequences of every state-changing operation, with
// close-and-reopen in between, against a simple model of what each key's
// state must be. After every step the counters must equal a full scan
// (Verify) and every key must be in the state the model says.
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
		}
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
						model[id] = &mstate{state: Pending, variant: variants[i], class: items[i].Class}
						seqOf[id] = res[i].Seq
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
					model[id] = &mstate{state: Pending, variant: variants[i], class: items[i].Class}
					seqOf[id] = r.Seq
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
					model[leased[s]].state = Synced
					delete(leased, s)
				}
				if err := q.MarkSynced(acks); err != nil {
					rt.Fatal(err)
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
					model[leased[s]].state = Quarantined
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
					m.state = Pending
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
				model[id].state = Purged
			},
			"tick": func(rt *rapid.T) {
				clk.Add(time.Duration(rapid.IntRange(1, 40).Draw(rt, "seconds")) * time.Second)
			},
			"reopen": func(rt *rapid.T) {
				if err := q.Close(); err != nil {
					rt.Fatal(err)
				}
				q, err = Open(Options{Path: path, StoreID: testStore, Clock: clk.Now, MaxGroup: 8})
				if err != nil {
					rt.Fatal(err)
				}
				clear(leased)
			},
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
