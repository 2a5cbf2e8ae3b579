package dlqtest

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rxedge/agent/queue"
)

// TestPending: only the movements still pending are listed, in sequence
// order, with their records; synced and quarantined ones are not.
func TestPending(t *testing.T) {
	clk := NewClock()
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: "S0042", Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if got := Pending(t, q); len(got) != 0 {
		t.Fatalf("empty queue: %d pending", len(got))
	}
	movementJSON := func(id string) string {
		return fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, id)
	}
	var keys []string
	var seqs []uint64
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		k, s := Enqueue(t, q, clk.Now(), movementJSON(id))
		keys, seqs = append(keys, k), append(seqs, s)
	}
	Quarantine(t, q, clk.Now(), movementJSON("m5"), "")
	if _, err := q.Lease(clk.Now(), 10); err != nil {
		t.Fatal(err)
	}
	if err := q.Settle(queue.Settlement{Acks: []queue.Ack{{Seq: seqs[1], StreamSeq: 7}}, Release: []uint64{seqs[0], seqs[2], seqs[3]}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range Pending(t, q) {
		got = append(got, r.KeyString())
	}
	if want := []string{keys[0], keys[2], keys[3]}; !slices.Equal(got, want) {
		t.Errorf("pending %v, want %v", got, want)
	}
}
