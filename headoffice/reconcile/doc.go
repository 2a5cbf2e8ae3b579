// Package reconcile is head office's reconciliation of central's archive
// against what each store acknowledged (DESIGN §5, Reconciliation).
//
// Run reads every archive stream once, in order, with ordered consumers
// and headers only, and gathers per store the Rx-Seq held in a Set of
// ranges, so its memory grows with the gaps, not with the movements. Keys
// archived twice are found with a Bloom filter of 16 bits per record
// (false positives about 0.05%) and counted exactly by a second read of
// only the stores concerned; a sequence archived twice is checked the
// same way. Each store's highest acknowledged sequence comes from the
// fleet view; the stores with missing sequences are asked, with the
// signed reconcile command of package remote, a bounded number at a time,
// what they hold for them; and the Report says per store what is
// explained (pending, quarantined, purged, in transit) and what is not
// (synced at the store but not archived, unknown to the store, no answer,
// a refusal, a bad answer, not asked), with repeats, conflicts and
// reused sequences.
//
// Its promises: a missing sequence is explained only by a well-formed
// answer of its store that covers exactly the sequences asked, in known
// states, with bounded printable reasons; anything else the store answers
// leaves every sequence of that request unexplained as a bad answer, and
// what a store can send is bounded by the server's max_payload. The
// report holds store ids, sequences, keys, counts and reasons only
// (DESIGN P6): the archive is read headers only, never a payload.
package reconcile
