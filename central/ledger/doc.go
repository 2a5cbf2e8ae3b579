// Package ledger is the contract of a store's verifiable record: what a
// store logs, signs and publishes so that an auditor can check central's
// archive without trusting central's administrator.
//
// Each store keeps an append-only Merkle tree of its acknowledged
// movements (RFC 6962 hashing, as in golang.org/x/mod/sumdb/tlog): one
// leaf per movement, in store-sequence order, holding the movement's
// sequence, key and digest (Leaf). A store's data file may start a new
// log (a replaced or restored PC, a new key): a log is named by the store
// and a random log id, and its first leaf's sequence is carried in its
// checkpoints, so a store's record is a series of logs, each covering a
// run of consecutive sequences.
//
// The store signs checkpoints of its log (Checkpoint: the C2SP
// tlog-checkpoint text, signed as a golang.org/x/mod/sumdb/note note with
// the store's Ed25519 key) and publishes each, with the consistency proof
// from its previous checkpoint (Message), to its own movement subjects
// under a checkpoint token (CheckpointToken), so central archives it like
// a movement. Head office may countersign a checkpoint (a second note
// signature) once it is consistent with the last one it countersigned.
//
// The store never needs the whole tree: it keeps its Frontier (the roots
// of the tree's maximal complete subtrees, at most 64 hashes) and the leaf
// hashes since its last checkpoint, which is all ProveConsistency needs.
// Verifiers rebuild trees from the archive leaf by leaf with a Frontier
// too, in memory that does not grow with the log.
//
// This package imports nothing of the project's: both ends link it.
package ledger
