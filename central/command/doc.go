// Package command is the contract of the remote commands between head
// office and a store (DESIGN §5): the subjects rx.ctl.<store>.<cmd>, the
// signed JSON Envelope an operator sends, the Reply a store answers, and
// every command's arguments and result (status, dlq.list, dlq.redrive,
// reconcile) and the fleet view's Summary. Both ends import it: the
// store's responder (package remote) and head office's client (package
// fleet); it links nothing of either, so neither side's code reaches the
// other's.
//
// A command is signed over its exact subject, store, command, arguments,
// expiry and a nonce (SigningBytes); the signature is an operator NKey's
// Ed25519 over bytes that start with a domain of their own, so a
// signature means nothing anywhere else. Replies hold keys, counts,
// states, reasons and times: never a payload (DESIGN P6).
package command
