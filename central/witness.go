package central

import "github.com/nats-io/nats.go/jetstream"

// The witness stream: head office's witness countersigns the stores'
// checkpoints (central/ledger) and publishes each countersigned one here,
// under its store's subject. `hq provision` creates it beside the
// archives; the witness only publishes to it.
const (
	// WitnessStreamName is the stream of countersigned checkpoints.
	WitnessStreamName = "RX_WITNESS"
	// WitnessPrefix starts its subjects, one per store (WitnessSubject).
	WitnessPrefix = "rx.witness."
	// WitnessAPIPrefix is the JetStream API prefix of the witness, whose
	// account of its own imports its reads of the archives and of the
	// witness stream's info from central's $JS.API under it (its client
	// uses jetstream.NewWithAPIPrefix(nc, WitnessAPIPrefix)). Its second
	// token is not "witness", so that no API subject is a witness subject.
	WitnessAPIPrefix = "rx.witness-api."
	// WitnessMaxMsgSize bounds a countersigned checkpoint: a checkpoint's
	// note (within a checkpoint message, at most central/ledger's
	// MaxMessage, 8 KiB) with the witness's signature line added.
	WitnessMaxMsgSize = 16 << 10
)

// WitnessSubject is where the witness publishes a store's countersigned
// checkpoints.
func WitnessSubject(store string) string { return WitnessPrefix + store }

// WitnessStreamConfig is the witness stream for the options of central's
// other streams: one subject per store, kept as long as the archive keeps
// movements (o.Retention), no deletes or purges through the API, the
// replicas of the archives, and as few consumers as an archive allows
// (the auditor reads it with ordered consumers).
func WitnessStreamConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:         WitnessStreamName,
		Description:  "RxEdge witness: the stores' checkpoints head office countersigned",
		Subjects:     []string{WitnessPrefix + ">"},
		Retention:    jetstream.LimitsPolicy,
		Storage:      jetstream.FileStorage,
		Discard:      jetstream.DiscardNew,
		DenyDelete:   true,
		DenyPurge:    true,
		Duplicates:   o.DuplicateWindow,
		MaxAge:       o.Retention,
		Replicas:     o.Replicas,
		MaxConsumers: ArchiveMaxConsumers,
		MaxMsgs:      -1,
		MaxBytes:     -1,
		MaxMsgSize:   WitnessMaxMsgSize,
	}
}
