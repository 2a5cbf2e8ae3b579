// Package sync delivers the queue's pending movements to central (a NATS
// JetStream stream) exactly once, and answers central's control requests.
//
// Promises:
//
//   - Exactly once (DESIGN P2). Every publish carries the movement's key as
//     Nats-Msg-Id and Nats-Expected-Last-Subject-Sequence: 0 on its own
//     subject rx.mv.<store>.<key>, so central stores a key at most once
//     however often it is resent. When central answers that the subject is
//     already taken, the sender reads the stored message back and compares
//     digests: the same digest is the earlier delivery (synced), another is
//     a conflict (quarantined). A movement leaves pending only after central
//     acknowledged it or it was quarantined.
//   - Offline is not failure (P4). Time disconnected, or with central unable
//     to accept anything (stream full, no permission, no stream, or every
//     movement failing at once), charges no movement an attempt: the sender
//     pauses, probes with full-jitter backoff capped at five minutes, and
//     resumes on the first success. A transient failure is charged to a
//     movement only once another movement succeeded after it — the evidence
//     that the failure was the movement's own.
//   - Spread-out retries (P5). Per-movement delays are full-jitter
//     exponential (package retry); after a reconnect the sender waits a
//     random time up to sync.resume_jitter.
//   - No payload in logs (P6): log lines carry keys, sequences, counts and
//     reasons.
//
// Ownership: one goroutine (the sender loop) owns the connection state and
// what is in flight; another (the settler) owns the outcomes: it waits for
// acknowledgements in the order the movements were sent, classifies them,
// and commits them to the queue in groups (one transaction for many).
package sync
