package queue

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

// TestFailedOpCommitsNothingOfItself runs a group of three ops in which the
// middle one, an enqueue of K, fails in one of the ways an op can fail. An
// op may refuse itself only before it writes, by a rejection from its check
// phase; any other error, and a rejection after a write, aborts it. Either
// way nothing of the failed op is committed, it is answered with its own
// error, and the ops around it commit in one transaction as if it had not
// been submitted: the last op, which enqueues K too, stores it as new.
func TestFailedOpCommitsNothingOfItself(t *testing.T) {
	cause := errors.New("the op failed")
	tests := []struct {
		name string
		fail func(o *op)
	}{
		{"writes, then fails", func(o *op) {
			apply := o.apply
			o.apply = func(tx *bolt.Tx) error {
				if err := apply(tx); err != nil {
					return err
				}
				return cause
			}
		}},
		{"writes, then rejects", func(o *op) {
			apply := o.apply
			o.apply = func(tx *bolt.Tx) error {
				if err := apply(tx); err != nil {
					return err
				}
				return reject(cause)
			}
		}},
		{"rejects in its check", func(o *op) {
			o.check = func(view) error { return reject(cause) }
		}},
		{"fails in its check", func(o *op) {
			o.check = func(view) error { return cause }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			q := openTest(t, filepath.Join(t.TempDir(), "agent.db"), clk)
			k, l := mv(t, "K", 0, ""), mv(t, "L", 0, "CII")

			before := &op{apply: func(tx *bolt.Tx) error {
				return appendEvents(tx, Event{At: clk.Now(), Action: ActionStart, Actor: ActorAgent, Reason: "before"})
			}}
			bad := q.submission([]movement.Prepared{k}, true)
			tt.fail(&bad.op)
			badAfter := false
			bad.after = func() { badAfter = true }
			after := q.submission([]movement.Prepared{k, l}, true)

			commits := q.Commits()
			group := []*op{before, &bad.op, &after.op}
			for _, o := range group {
				o.result = make(chan struct{})
			}
			q.commit(group)

			if !errors.Is(bad.err, cause) || badAfter {
				t.Fatalf("failed op answered %v (after ran: %v), want %v and no after", bad.err, badAfter, cause)
			}
			if before.err != nil || after.err != nil {
				t.Fatalf("the other ops answered %v and %v, want both committed", before.err, after.err)
			}
			if got := q.Commits() - commits; got != 1 {
				t.Fatalf("%d commits for the group, want 1", got)
			}
			res := after.sorted.res
			if res[0].Duplicate || res[0].Seq != 1 || res[1].Duplicate || res[1].Seq != 2 {
				t.Fatalf("the last op's results %+v, want K new with seq 1 and L new with seq 2", res)
			}
			s, err := q.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if s.Count(Pending) != 2 || s.NextSeq != 3 {
				t.Fatalf("%d pending, next seq %d; want 2 and 3", s.Count(Pending), s.NextSeq)
			}
			var journal []string
			q.Events(time.Time{}, func(e Event) bool { journal = append(journal, e.Reason); return true })
			if len(journal) != 1 || journal[0] != "before" {
				t.Fatalf("journal %v, want [before]", journal)
			}
			verify(t, q)
		})
	}
}
