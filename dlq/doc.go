// Package dlq is the operator's side of the quarantine: list, show,
// redrive, export and purge the movements the sender gave up on, and read
// the audit journal. The local API (package control: the control socket,
// or in-process over the data file when the agent is stopped) and remote
// commands all call the same Service, so every operation has one
// implementation. The package knows nothing of HTTP.
//
// Its promises:
//
//   - No patient data outside the payload (DESIGN P6). List, Show without
//     its payload flag, redrive and purge answers, errors and journal events
//     carry keys, movement ids, classes, reasons, error kinds and texts,
//     counts and times, never a movement's payload. Payloads leave the agent
//     only through Show with withPayload, Export, and the export file a
//     purge writes first; those are for operators and are not logs.
//   - Everything an operator did is on record (P8). Redrive and purge are
//     journalled by the queue in the same transaction that changes the
//     movements, with the actor, the reason text and the keys; an export is
//     journalled, with its keys, before any movement is written out.
//   - Nothing is purged that was not exported (P3). Purge writes the
//     movements to purged-<UTC time>.jsonl in the data directory, fsyncs the
//     file and the directory, and only then removes them from the queue. A
//     purged key is gone for good: it cannot be redriven or submitted again.
//   - Redrive resets the attempts and, with a spread, gives each movement a
//     due time uniform over the spread window, so that sending a large
//     quarantine again does not stampede central (P5).
//
// A Service holds no mutable state of its own: the queue's transactions are
// the only owner of the data, so one Service may serve concurrent requests.
package dlq
