// Command bench measures the agent against the performance targets of its
// issues, in one process, against embedded hubs on loopback ports:
//
//	go run ./cmd/bench [-quick] [-json FILE] [-only NAMES]
//
// Scenarios (NAMES is a comma-separated subset):
//
//	ingest   HTTP intake and group commit against one bbolt Update per movement and
//	         against a trivial HTTP handler with bbolt DB.Batch; movement.Decode's cost
//	sync     backlog drain and trickle against raw PublishAsync to a SyncAlways stream
//	drain    backlog drains (random and key order) against the raw atomic-batch
//	         publisher into the production layout; data file bytes per movement
//	bulk     `agent enqueue -f` against raw bbolt writing the queue's records
//	scale    start-up, heap, status and step costs with 10k, 100k and 1M pending
//	herd     a fleet of stores resuming after central comes back, with and without jitter
//	compact  file size before and after compacting a drained file
//	intake   HL7 over MLLP against HTTP ingest; an ASAP file against `agent enqueue -f`
//	sink     head office's sink into PostgreSQL against a raw COPY of the same rows
//	ledger   ingest with the store's verifiable log against without it; bytes it adds
//
// Every ratio is taken against a baseline measured in the same run, because
// the machines it runs on are noisy. It prints a Markdown table and, with
// -json, writes the same figures to FILE. Everything it writes goes to a
// temporary directory that is removed at the end. -quick shrinks the sizes
// for a CI smoke run; figures named for sizes it did not reach (the 1m ones)
// are then reported as not measured.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
