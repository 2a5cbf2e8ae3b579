// Package fleet is head office's end of control over NATS (DESIGN §5):
// the Client that signs commands with an operator's key and sends them to
// a store (status, dlq.list, dlq.redrive, reconcile; the contract is
// package command), and the fleet view, every store's latest summary in
// central's bucket RX_FLEET (Read), judged against a roster (Judge),
// and the same view kept in memory (Index): an ordered consumer follows
// the bucket from every store's last summary on, so that head office's
// pages and watches ask the index, never central, and their cost does
// not grow with the requests or the archive. The index also follows the
// witness stream, keeping only the countersignatures its key verifies.
//
// It links nothing of the store's (no queue, no bbolt): what a store
// answers is read as package command's and package status's documents.
// It holds counts, states, reasons and times, never a payload (DESIGN P6).
package fleet
