// Package audit is head office's check of the stores' verifiable records
// (central/ledger) against central's archive, without trusting central.
//
// Verify is one pass over the archives. First each store is asked (the
// signed ledger command) for its latest checkpoint. Then each archive is
// read once, whole, with an ordered consumer, up to its end when the pass
// began: every payload is checked against its digest; every record under
// a checkpoint token goes through ledger.OpenMessage, and only a
// checkpoint a roster key of its store signed makes or extends a log (its
// first sequence, its consistency proof against the log's previous
// checkpoint, its root at its size); nothing an insider can write without
// a store's key (a subject token, a message id, a size) chooses anything,
// and every other such record is counted per store, the first few listed
// (KindUnverifiedCheckpoint), in memory that does not grow with their
// number. Every movement's leaf goes into its log's tree in sequence
// order, and the tree's root is compared with each signed root as soon as
// the leaves reach its size, whether the checkpoint came before its
// leaves or after; leaves read before their log's first checkpoint wait
// for it. Where a root differs, the store is asked for its leaves between
// the last size that matched and that one, and each sequence changed is
// named; the tree goes on from the store's leaves.
//
// With a StateStore (Options.State), the pass starts where the last one
// saved its state and saves its own at the end: per archive how far it
// read and what it looked like (created, first sequence, deleted count,
// max_age, the last record's fingerprint, marks of sequence and time),
// per log its tree (two frontiers, the leaves since the last signed root,
// the roots waiting for their leaves), and the rolling re-check's place.
// It checks first that nothing below that changed (a recreated, shorter or
// deleted-from archive, a first sequence moved other than by the max_age,
// a shortened max_age, the last record read back different): any such
// change is a finding, and the pass then verifies every log again from
// its anchor against what was verified. Then it reads only what the
// archives gained. The rolling re-check sweeps the archives again in
// order, a budget of records a pass, and compares every log with what
// was verified, for what those checks cannot see. Verify without a state
// is the same pass from an empty state, saving nothing. A pass that fails
// or is killed saves nothing: the next starts from the last state saved.
//
// Its memory is per log a roster key signed: two frontiers (at most 64
// hashes each), the signed roots waiting for their leaves (MaxSnapshots),
// the leaves since the last signed root and those ahead of a missing one
// (MaxBuffered each); it does not grow with the archive, nor with the
// records no store signed. The state keeps less: MaxSavedLeaves leaves a
// log.
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
