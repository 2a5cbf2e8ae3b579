// Package remote is control over NATS (DESIGN §5): the agent's responder
// for rx.ctl.<store>.status, rx.ctl.<store>.dlq.list,
// rx.ctl.<store>.dlq.redrive and rx.ctl.fleet.status, and the operator's
// client that sends them, signs them and gathers the fleet's replies.
//
// A command is a JSON Envelope; its reply a JSON Reply, {"ok":true,
// "result":…} or {"ok":false,"error":…}.
//
// Promises:
//
//   - Only an operator changes anything (DESIGN P7). A command that changes
//     the store (dlq.redrive) is applied only when it is signed by an
//     operator NKey listed in control.operator_keys, names this store and
//     this command in what is signed, has not expired (see MaxLifetime and
//     Skew) and carries a nonce never accepted before. Read-only commands
//     need no signature (the server's permissions let only operators
//     publish rx.ctl.>), but one that carries a signature must pass the
//     same checks.
//   - A nonce is accepted at most once, across restarts: accepted nonces
//     are kept in memory until their command expires, and every accepted
//     signed command is journalled, with its nonce, before it is applied;
//     a starting responder reloads the nonces of the journal's recent
//     events.
//   - Everything is on record (P8). Every refusal is journalled
//     (queue.ActionRefused) with the actor, remote:<operator key> or
//     remote:unsigned, and the reason; a remote redrive is journalled by
//     package dlq with the operator's key as its actor and the command's
//     reason text.
//   - No patient data (P6). Replies, errors, log lines and journal events
//     hold keys, counts, states, reasons and times: never a payload, and
//     never a command's bytes quoted back.
//
// Ownership: a Responder's only mutable state is its set of accepted
// nonces, behind a mutex; the queue's transactions own everything else.
// nats.go calls each subscription's handler from one goroutine, so the
// commands of one subject run one at a time.
package remote
