package queue_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rxedge/agent/queue"
)

// With the agent stopped, a tool checks whether the data file is worth
// compacting and compacts it.
func ExampleCompact() {
	dir, _ := os.MkdirTemp("", "rxedge-example-")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "agent.db")
	q, err := queue.Open(queue.Options{Path: path, StoreID: "S0042"})
	if err != nil {
		fmt.Println(err)
		return
	}
	q.Close()

	// At start-up the agent compacts only when more than half of the file
	// and more than 64 MiB are free; a new file has neither.
	need, _, err := queue.CompactionNeeded(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("worth compacting:", need)

	res, err := queue.Compact(path, queue.CompactOptions{Actor: "local:admin", Reason: "after the backlog drained"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("smaller or equal:", res.After <= res.Before)
	// Output:
	// worth compacting: false
	// smaller or equal: true
}
