// Package fleet is head office's end of control over NATS (DESIGN §5):
// the Client that signs commands with an operator's key and sends them to
// a store (status, dlq.list, dlq.redrive, reconcile; the contract is
// package command), and the fleet view, every store's latest summary in
// central's bucket RX_FLEET (Read), judged against a roster (Judge).
//
// It links nothing of the store's (no queue, no bbolt): what a store
// answers is read as package command's and package status's documents.
// It holds counts, states, reasons and times, never a payload (DESIGN P6).
package fleet
