// Package audit is head office's check of the stores' verifiable records
// (central/ledger) against central's archive, without trusting central.
//
// Verify reads the archives twice with ordered consumers. The first read,
// headers only, finds each store's logs and their checkpoint sizes from
// the checkpoint messages' ids (ledger.CheckpointToken); one signed
// checkpoint of each log, fetched by its stream sequence, gives the log's
// first sequence. Each store is then asked (the signed ledger command)
// for its latest checkpoint. The second read, with payloads, streams each
// store's movements in sequence order into a ledger.Frontier per log,
// checks every payload against its digest, and every checkpoint's
// signature against the roster and its consistency proof against the
// log's previous checkpoint; it keeps the tree's root at the checkpoint
// sizes the first read found (a bounded number per log). At the end the
// roots of the archive's leaves are compared with the checkpoints' roots;
// where they differ, the store is asked for its leaves between the last
// size that matched and the first that did not, and a third read of that
// store's archive, headers only, names each sequence changed.
//
// Its memory is per log: the frontier (at most 64 hashes), the roots kept
// at checkpoint sizes (MaxSnapshots), and the leaves that arrive ahead of
// a missing one (MaxBuffered); it does not grow with the archive.
//
// The Witness countersigns checkpoints (a second note signature) only
// when they are signed by a roster key of their store and consistent with
// the last checkpoint it countersigned for that log, so a store cannot
// fork its history unseen; it keeps its state in a local file.
//
// Prove writes an inspector's proof of one movement (ledger.Proof).
//
// Reports hold store ids, log ids, sequences, sizes and counts (DESIGN
// P6): payloads are read to check their digests and never reported.
package audit
