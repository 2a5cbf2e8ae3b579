// Package sync delivers the queue's pending movements to central (a NATS
// JetStream stream) exactly once, and answers central's control requests.
//
// Promises:
//
//   - Exactly once (P2). Every publish carries the movement's key and
//     digest as Nats-Msg-Id (key-digest) and Nats-Expected-Last-Subject-Sequence: 0 on its own
//     subject rx.mv.<store>.<key>, so central stores a key at most once
//     however often it is resent. When central answers that the subject is
//     already taken, the sender reads the stored message back and compares
//     digests: the same digest is the earlier delivery (synced), another is
//     a conflict (quarantined). A movement leaves pending only after central
//     acknowledged it or it was quarantined.
//   - Offline is not failure (P4). Time disconnected, or with central unable
//     to accept anything (stream full, no permission, no stream, no answer
//     for this store, or every movement failing at once), charges no
//     movement an attempt: the sender pauses, probes with full-jitter
//     backoff capped at five minutes, and resumes on the first probe that
//     reaches central. A failure is charged to a movement only on evidence
//     that central was alive for this store: another movement stored after
//     it, central's answer about it, or central's answer to a liveness
//     probe when the movement got none.
//   - No movement stalls the store. An atomic batch that fails without
//     naming a member is resent one member at a time, so a poison movement
//     is charged on its own and quarantined after its class ceiling while
//     the others are delivered; a movement that failed before is never put
//     in a batch again.
//   - Bounded, spread-out retries (P5). Per-movement delays are full-jitter
//     exponential (package retry); "in process" answers are retried soon
//     and uncharged only a few times in a row; a pause that closely
//     follows a resume goes on with the probe backoff, so the sender cannot
//     flap between the two faster than the backoff's cap; after a
//     reconnect the sender waits a random time up to Options.ResumeJitter.
//   - No payload in logs (P6): log lines carry keys, sequences, counts and
//     reasons.
//
// Where each rule lives:
//
//   - options.go: Options and every default (settings maps the
//     configuration file onto them).
//   - classify.go: what a publish error means (verdict), by JetStream
//     error code; answered or not; and why central cannot be reached or
//     used (Diagnose), as one of status.ConnReasons.
//   - health.go: the decisions, as pure types with table tests
//     (health_test.go). blame holds the settler's evidence and decides
//     synced / charged / uncharged / pause for each outcome (rules 1–8 in
//     its comment); splitBatch decides what a failed batch becomes;
//     diagnosis holds the current connection problem and decides which
//     of its changes are logged;
//     pacing holds the loop's state (offline, resuming, online, paused) and
//     its probe schedule.
//   - alive.go: the liveness probe, a publish central must refuse and that
//     stores nothing.
//   - link.go: the connection state both goroutines share — transport,
//     connection context, status snapshot, metrics.
//   - sender.go: the loop, which gathers events and carries pacing's
//     verdicts out: what to lease, single publishes or a batch, probes.
//   - settle.go: the settler, which waits for outcomes in send order,
//     judges them with blame, asks alive where blame needs it, and commits
//     each group in one transaction.
//   - engine.go: the connection, its options and the heartbeat.
//
// Ownership: one goroutine (the sender loop) owns the pacing and what is
// in flight; another (the settler) owns the outcomes and the evidence. The
// settler reaches the loop only by events; both read the link.
package sync
