package central

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamName is the JetStream stream holding every store's movements.
const StreamName = "RX_MOVEMENTS"

// Defaults of StreamOptions.
const (
	// DefaultDuplicateWindow is how long the server remembers a Nats-Msg-Id.
	// A resend of the same key inside the window is answered with a
	// duplicate PubAck; after it, with error 10071 (wrong last sequence),
	// because the subject already holds its one message.
	DefaultDuplicateWindow = 10 * time.Minute
	// DefaultReplicas suits a single server; a production cluster uses 3.
	DefaultReplicas = 1
)

// StreamOptions are the settings of central's streams that differ between
// deployments. The zero value gives the production settings of one server
// with one partition.
type StreamOptions struct {
	// Partitions is how many partitions central has; 0 means 1. Partition
	// is the one StreamConfig and ArchiveConfig describe, from 0.
	Partitions, Partition int
	// DuplicateWindow is the Nats-Msg-Id window; 0 means DefaultDuplicateWindow.
	DuplicateWindow time.Duration
	// MaxAge is the dedupe horizon, the movement stream's max_age; 0 means
	// DefaultHorizon.
	MaxAge time.Duration
	// Retention is the archives' and the witness stream's max_age; 0
	// means DefaultRetention.
	Retention time.Duration
	// LowerRetention lets provisioning lower an existing archive's or
	// witness stream's max_age to Retention, which has the server delete
	// at once every record older than that. Without it a longer max_age
	// is kept, and provisioning says so.
	LowerRetention bool
	// Replicas is the number of copies in a cluster; 0 means DefaultReplicas.
	Replicas int
	// MaxMsgs, MaxBytes and MaxMsgSize bound the stream; 0 means unlimited.
	// Production leaves them unlimited; tests set them to fill the stream.
	MaxMsgs    int64
	MaxBytes   int64
	MaxMsgSize int32
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.DuplicateWindow <= 0 {
		o.DuplicateWindow = DefaultDuplicateWindow
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultHorizon
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.Partitions <= 0 {
		o.Partitions = 1
	}
	if o.Replicas <= 0 {
		o.Replicas = DefaultReplicas
	}
	return o
}

// StreamConfig returns the configuration of the movement stream of the
// partition o names (RX_MOVEMENTS with one partition): one message per
// subject, new messages refused (never old ones evicted) at every limit,
// no deletes or purges through the API, direct get for the digest check and
// atomic batches for backlog drains.
func StreamConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:                 MovementStream(o.Partition, o.Partitions),
		Description:          "RxEdge inventory movements, one message per store and key",
		Subjects:             []string{PartitionSubjects(o.Partition, o.Partitions)},
		Retention:            jetstream.LimitsPolicy,
		Storage:              jetstream.FileStorage,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		DenyDelete:           true,
		DenyPurge:            true,
		AllowDirect:          true,
		AllowAtomicPublish:   true,
		Duplicates:           o.DuplicateWindow,
		MaxAge:               o.MaxAge,
		Replicas:             o.Replicas,
		MaxMsgs:              unlimited(o.MaxMsgs),
		MaxBytes:             unlimited(o.MaxBytes),
		MaxMsgSize:           int32(unlimited(int64(o.MaxMsgSize))),
		MaxConsumers:         -1,
	}
}

// unlimited maps "not set" to the server's -1.
func unlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}
