package command

// CmdLedger asks a store for its latest signed checkpoint and, when asked,
// the leaves it still holds for a run of sequences, so that a verifier can
// catch a central that dropped the newest checkpoints and name exactly
// which sequences an archive changed (see central/ledger). It only reads,
// but must be signed, like CmdReconcile.
const CmdLedger = "ledger"

// MaxLedgerLeaves bounds the leaves one ledger request asks for.
const MaxLedgerLeaves = 1000

// LedgerArgs are the arguments of ledger.
type LedgerArgs struct {
	// Leaves, when set, asks for the leaves of the sequences From..To
	// (at most MaxLedgerLeaves of them) that the store still holds.
	Leaves *SeqRange `json:"leaves,omitempty"`
}

// LedgerLeaf is one leaf of a store's log, as central/ledger.Leaf: the
// sequence, and the key and digest in lower-case hex.
type LedgerLeaf struct {
	Seq    uint64 `json:"seq"`
	Key    string `json:"key"`
	Digest string `json:"digest"`
}

// LedgerResult is a store's answer to ledger.
type LedgerResult struct {
	// Checkpoint is the store's latest signed checkpoint (the note's
	// text and signatures), empty when it has signed none.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Published says whether central acknowledged that checkpoint.
	Published bool `json:"published"`
	// PublicKey is the store's current verifier key.
	PublicKey string `json:"public_key,omitempty"`
	// Leaves are the leaves asked for that the store still holds, in
	// sequence order; a sequence it no longer holds (synced and pruned)
	// or never assigned is left out.
	Leaves []LedgerLeaf `json:"leaves,omitempty"`
}
