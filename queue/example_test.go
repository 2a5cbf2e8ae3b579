package queue_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// The life of a movement: accepted durably, leased by the sender, marked
// synced once central acknowledged it.
func Example() {
	dir, _ := os.MkdirTemp("", "queue-example")
	defer os.RemoveAll(dir)
	q, err := queue.Open(queue.Options{Path: filepath.Join(dir, "agent.db"), StoreID: "S0042"})
	if err != nil {
		panic(err)
	}
	defer q.Close()

	p, errs := movement.Prepare([]byte(`{"movement_id":"POS-17","type":"dispense","ndc":"12345-6789-01","quantity":2,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`), "S0042", time.Now())
	if errs != nil {
		panic(errs)
	}
	// Enqueue returns once the movement is in an fsynced commit.
	res, _ := q.Enqueue([]movement.Prepared{p})
	fmt.Println("seq", res[0].Seq, "duplicate", res[0].Duplicate)
	res, _ = q.Enqueue([]movement.Prepared{p})
	fmt.Println("again: duplicate", res[0].Duplicate)

	due, _ := q.Lease(time.Now(), 10)
	fmt.Println("due", len(due), due[0].MovementID)
	q.MarkSynced([]queue.Ack{{Seq: due[0].Seq, StreamSeq: 1}})

	s, _ := q.Stats()
	fmt.Println("pending", s.Count(queue.Pending), "synced", s.Count(queue.Synced))
	// Output:
	// seq 1 duplicate false
	// again: duplicate true
	// due 1 POS-17
	// pending 0 synced 1
}

// A partial submission: each movement is stored or refused on its own, in
// one transaction.
func ExampleQueue_EnqueueEach() {
	dir, _ := os.MkdirTemp("", "queue-example")
	defer os.RemoveAll(dir)
	q, err := queue.Open(queue.Options{Path: filepath.Join(dir, "agent.db"), StoreID: "S0042"})
	if err != nil {
		panic(err)
	}
	defer q.Close()

	prep := func(id string, qty int) movement.Prepared {
		p, errs := movement.Prepare([]byte(fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":%d,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, id, qty)), "S0042", time.Now())
		if errs != nil {
			panic(errs)
		}
		return p
	}
	res, err := q.EnqueueEach([]movement.Prepared{prep("POS-17", 2), prep("POS-18", 1), prep("POS-17", 3)})
	if err != nil {
		panic(err)
	}
	for i, r := range res {
		var ce *queue.ConflictError
		switch {
		case errors.As(r.Err, &ce):
			fmt.Printf("%d: refused, same movement_id as %d\n", i, ce.Other)
		case r.Duplicate:
			fmt.Printf("%d: duplicate of seq %d\n", i, r.Seq)
		default:
			fmt.Printf("%d: stored as seq %d\n", i, r.Seq)
		}
	}
	// Output:
	// 0: stored as seq 1
	// 1: stored as seq 2
	// 2: refused, same movement_id as 0
}
