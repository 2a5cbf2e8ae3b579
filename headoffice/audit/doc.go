// Package audit is head office's check of the stores' verifiable records
// (central/ledger) against central's archive, without trusting central.
//
// Verify reads the archives twice with ordered consumers, each up to the
// archive's end when it began. First each store is asked (the signed
// ledger command) for its latest checkpoint. The first read, whole,
// checks every payload against its digest, and takes every record under a
// checkpoint token through ledger.OpenMessage: only a checkpoint a roster
// key of its store signed makes or extends a log (its first sequence, its
// consistency proof against the log's previous checkpoint, its root at
// its size, a bounded number per log); nothing an insider can write
// without a store's key (a subject token, a message id, a size) chooses
// anything, and every other such record is counted per store, the first
// few listed (KindUnverifiedCheckpoint), in memory that does not grow
// with their number. The second read, headers only, streams each store's
// movements in sequence order into a ledger.Frontier per log and keeps
// the tree's root at the signed sizes. At the end the roots of the
// archive's leaves are compared with the checkpoints' roots; where they
// differ, the store is asked for its leaves between the last size that
// matched and the first that did not, and a third read of that store's
// archive, headers only, names each sequence changed.
//
// Its memory is per log a roster key signed: the frontier (at most 64
// hashes), the signed roots (MaxSnapshots), and the leaves that arrive
// ahead of a missing one (MaxBuffered); it does not grow with the archive,
// nor with the records no store signed.
//
// The Witness countersigns checkpoints (a second note signature) only
// when they are signed by a roster key of their store and consistent with
// the last checkpoint it countersigned for that log, so a store cannot
// fork its history unseen; it keeps its state in a local file.
//
// Prove writes an inspector's proof of one movement (ledger.Proof) on the
// newest checkpoint of its log that a roster key of its store signed,
// chosen by a Selector; without the roster it writes nothing
// (ErrNoRoster). A Selector takes records one at a time, so a verifier
// that reads the archive as it grows can use it as it is.
//
// Reports hold store ids, log ids, sequences, sizes and counts (DESIGN
// P6): payloads are read to check their digests and never reported.
package audit
