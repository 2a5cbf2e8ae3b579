// Package remote is the store's end of control over NATS (DESIGN §5): the
// agent's responder for rx.ctl.<store>.status, rx.ctl.<store>.dlq.list,
// rx.ctl.<store>.dlq.redrive and rx.ctl.<store>.reconcile (what the store
// holds for sequences central's archive lacks), and the store's summary
// in the fleet view, central's bucket RX_FLEET under its own key
// (PublishSummary). Head office's end, the client that signs and sends the
// commands and reads the fleet view, is package fleet; the contract both
// import is package command: a command is a JSON command.Envelope, its
// reply a JSON command.Reply, {"ok":true,"result":…} or
// {"ok":false,"error":…}.
//
// Promises:
//
//   - Commands are authenticated before anything else happens (DESIGN P7).
//     A message without a reply subject is dropped unread: operators always
//     ask for a reply, and what JetStream reflects onto a subject a
//     publisher chose (a PubAck, a direct get's answer) has none. Every
//     command must be signed by an operator NKey listed in
//     remote.operator_keys, over the exact subject it arrived on, its
//     store, command, arguments, expiry (see MaxLifetime and Skew) and a
//     nonce never accepted before; remote.allow_unsigned_reads (off by
//     default) lets status and dlq.list through unsigned.
//   - A nonce is accepted at most once, across restarts: accepted nonces
//     are kept in memory until their command expires, and every accepted
//     signed command is journalled, with its nonce, before it is applied;
//     a starting responder reloads the nonces of the journal's recent
//     events.
//   - Everything an operator did is on record (P8), and nobody else can
//     fill the journal: refusals are journalled in aggregate, one event
//     per cause per RefusalWindow with the count it stands for, and at
//     most RefusalBytesPerHour a hour. A refusal's actor is
//     remote:<operator key> only once that key's signature verified;
//     before, it is remote:unverified (or remote:unsigned), whatever key
//     the envelope claims. A remote redrive is journalled by package dlq
//     with the operator's key as its actor and the command's reason text.
//   - No patient data (P6). Replies, errors, log lines and journal events
//     hold keys, counts, states, reasons and times: never a payload, and
//     never a command's bytes quoted back.
//
// Ownership: a Responder's only mutable state is its set of accepted
// nonces, behind a mutex, and its refusal tallies, behind the
// tally.Reporter's; the queue's transactions own everything else.
// nats.go calls each subscription's handler from one goroutine, so the
// commands of one subject run one at a time.
package remote
