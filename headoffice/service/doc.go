// Package service is head office's service (hq run): one process that
// runs continuously what are otherwise separate commands, each a job
// under one supervisor — the sink, the witness, incremental
// verification, scheduled reconciliation and the fleet watch.
//
// Its promises:
//
//   - One supervisor owns every job's goroutine (Supervisor.Run). A job
//     that fails is reported (its state, rxedge_hq_job_runs_total
//     {result="error"}, a log line) and started again after a full-jitter
//     backoff (retry.Policy); it never stops another job. Run returns
//     once ctx ends and every job has returned, or StopTimeout has
//     passed: a job ends what it has in flight (the sink its
//     transaction) and no more.
//   - A job that writes takes its lease first (Leaser: a PostgreSQL
//     advisory lock per job held on a connection of its own), and stops
//     when the lease is lost. A second service against the same database
//     waits for each lease, its jobs shown as standby in /metrics and
//     /readyz, and takes a job over once the first lets go of it (or
//     dies, and PostgreSQL closes its connection).
//   - /readyz is 200 once every enabled job has completed a first pass
//     since the service started, or is retrying after a failure (which
//     /metrics and the body report), or waits as a standby for a lease
//     another service holds; it is 503 while any job is in its first
//     pass. /healthz is 200 while the process serves.
//   - Nothing a job reports holds a payload, a note, a prescription
//     reference or a secret (DESIGN P6): store ids, logs, kinds,
//     sequences, sizes and counts.
//
// Verification keeps its state in PostgreSQL (PGState, table
// verify_state) and its findings in verify_findings, written in the
// same transaction as the state, so that a kill -9 at any point leaves
// both as the last pass saved them.
package service
