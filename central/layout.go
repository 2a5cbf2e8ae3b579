package central

import (
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Central's layout. An agent always publishes to Subject(store, key) and
// reads back with DirectGetSubject, whatever the layout: central decides
// where that lands.
//
// Movements are held twice, for two purposes:
//
//   - The movement stream (StreamName, or one per partition) keeps one
//     subject per key, which is what refuses a second message for a key,
//     but only for the dedupe horizon (its max_age, DefaultHorizon): the
//     server keeps an index entry in memory per subject it holds, so its
//     memory grows with the keys inside the horizon, not with retention.
//   - The archive (ArchiveStreamName, or one per partition) is sourced
//     from the movement stream, with each message's subject rewritten to
//     its store's ArchiveSubject: a few subjects, so its memory grows with
//     the number of stores, while it keeps every movement for the
//     retention (DefaultRetention), with deletes and purges denied.
//
// A chain too big for one stream splits it into partitions by store
// (Partition): partition p of n holds the stores that nats-server's own
// {{partition(n, …)}} function sends to p, each in a movement stream and
// an archive of its own, which a cluster places on its own nodes. A store
// account's imports map its subjects onto its partition's (the generated
// server configuration, provision.CentralConfig), so an agent needs no setting
// to find it. One partition is today's single stream, RX_MOVEMENTS with
// subjects rx.mv.>, so a single server and the embedded hub need no
// mapping at all.
const (
	// DefaultHorizon is the dedupe horizon: how long central refuses a
	// second message for a key. It is shorter than an agent remembers a
	// synced key (retention.synced_keys, 40 days), so a resubmission the
	// agent has forgotten is one central has forgotten too: it is stored
	// again and archived a second time under its new sequence, and the
	// reconciliation reports a repeat (same digest) or a conflict. Were
	// the horizon the longer, central would refuse such a resubmission
	// and its new sequence would never be archived. Within the horizon an
	// agent's resends (lost acknowledgements, redrives) are refused.
	DefaultHorizon = 35 * 24 * time.Hour
	// DefaultRetention is how long the archive keeps a movement: two
	// years (21 CFR 1304.04) and a month.
	DefaultRetention = 761 * 24 * time.Hour
	// SixYearRetention keeps a movement six years and a month: DSCSA
	// asks a dispenser to keep the transaction information of what it
	// receives for six years, and the archive keeps every movement for
	// one age (its subjects name the store, not the type).
	SixYearRetention = 2223 * 24 * time.Hour
	// ArchiveMaxConsumers bounds the consumers on an archive: the
	// reconciliation's ordered consumers come and go, and the auditor,
	// whose grant cannot restrict a consumer's settings, cannot pile up
	// durable ones in central's account.
	ArchiveMaxConsumers = 32
	// MaxPartitions bounds Partitions.
	MaxPartitions = 64

	// ArchiveStreamName is the archive of a one-partition central; a
	// partitioned one has ArchiveStreamName_<p> (ArchiveStream).
	ArchiveStreamName = "RX_ARCHIVE"
	// ArchivePrefix starts every archive subject; see ArchiveSubject.
	ArchivePrefix = "rx.ar."
	// PartitionPrefix starts the subjects of a partitioned central's
	// movement streams: rx.mvp.<p>.<store>.<key>.
	PartitionPrefix = "rx.mvp."
	// AuditAPIPrefix is the JetStream API prefix of head office's auditor,
	// whose account of its own imports its reads of the archives and the
	// fleet view from central's $JS.API under it: its client uses
	// jetstream.NewWithAPIPrefix(nc, AuditAPIPrefix).
	AuditAPIPrefix = "rx.audit.api."
)

// Partition is the partition of store among n: FNV-1a (32 bits) of the
// store id modulo n, which is what nats-server's subject mapping function
// {{partition(n, …)}} computes for that one token. n ≤ 1 is partition 0.
func Partition(store string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(store))
	return int(h.Sum32() % uint32(n))
}

// MovementStream names the movement stream of partition p of n:
// StreamName for a one-partition central, StreamName_<p> otherwise.
func MovementStream(p, n int) string {
	if n <= 1 {
		return StreamName
	}
	return StreamName + "_" + strconv.Itoa(p)
}

// ArchiveStream names the archive of partition p of n: ArchiveStreamName
// for a one-partition central, ArchiveStreamName_<p> otherwise.
func ArchiveStream(p, n int) string {
	if n <= 1 {
		return ArchiveStreamName
	}
	return ArchiveStreamName + "_" + strconv.Itoa(p)
}

// ArchiveStreams names the archives of a central of n partitions: each
// partition's, and for n > 1 also ArchiveStreamName, the archive of the
// one-partition central it may have been moved from, which keeps the
// records older than the move.
func ArchiveStreams(n int) []string {
	names := []string{ArchiveStreamName}
	for p := 0; n > 1 && p < n; p++ {
		names = append(names, ArchiveStream(p, n))
	}
	return names
}

// IsArchiveStream tells whether name is an archive of some layout.
func IsArchiveStream(name string) bool {
	if name == ArchiveStreamName {
		return true
	}
	rest, ok := strings.CutPrefix(name, ArchiveStreamName+"_")
	if !ok {
		return false
	}
	p, err := strconv.Atoi(rest)
	return err == nil && p >= 0 && p < MaxPartitions && strconv.Itoa(p) == rest
}

// PartitionSubject is where central holds a store's movement in
// partition p of n: Subject(store, key) for a one-partition central,
// rx.mvp.<p>.<store>.<key> otherwise. PartitionSubject(p, n, store, ">")
// is every movement of the store.
func PartitionSubject(p, n int, store, key string) string {
	if n <= 1 {
		return Subject(store, key)
	}
	return PartitionPrefix + strconv.Itoa(p) + "." + store + "." + key
}

// PartitionSubjects is the subject filter of partition p of n's movement
// stream: StreamSubjects for a one-partition central, rx.mvp.<p>.>
// otherwise.
func PartitionSubjects(p, n int) string {
	if n <= 1 {
		return StreamSubjects
	}
	return PartitionPrefix + strconv.Itoa(p) + ".>"
}

// PartitionDirectGetSubject is where central answers a direct get of a
// store's movement in partition p of n; a store account imports it as
// DirectGetSubject(Subject(store, key)).
func PartitionDirectGetSubject(p, n int, store, key string) string {
	return jetstream.DefaultAPIPrefix + "DIRECT.GET." + MovementStream(p, n) + "." + PartitionSubject(p, n, store, key)
}

// ArchiveSubject is the one subject of a store in the archive:
// "rx.ar.<store>".
func ArchiveSubject(store string) string { return ArchivePrefix + store }

// KeyOfMsgID is the movement key of a Nats-Msg-Id made by MsgID, or ""
// when id is not one.
func KeyOfMsgID(id string) string {
	key, _, ok := strings.Cut(id, "-")
	if !ok {
		return ""
	}
	return key
}

// ArchiveConfig returns the configuration of the archive of the partition
// o names: sourced from that partition's movement stream, every message
// moved to its store's ArchiveSubject, kept for o.Retention, no deletes,
// purges or rollups through the API, and a duplicate window so that a
// source that delivers a message twice (after a leader change) stores it
// once.
func ArchiveConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	p, n := o.Partition, o.Partitions
	return jetstream.StreamConfig{
		Name:        ArchiveStream(p, n),
		Description: "RxEdge archive: every stored movement, one subject per store, kept for the retention",
		Sources: []*jetstream.StreamSource{{
			Name: MovementStream(p, n),
			SubjectTransforms: []jetstream.SubjectTransformConfig{{
				Source:      PartitionSubject(p, n, "*", "*"),
				Destination: ArchivePrefix + "{{wildcard(1)}}",
			}},
		}},
		Retention:    jetstream.LimitsPolicy,
		Storage:      jetstream.FileStorage,
		Discard:      jetstream.DiscardNew,
		DenyDelete:   true,
		DenyPurge:    true,
		AllowDirect:  true,
		Duplicates:   o.DuplicateWindow,
		MaxAge:       o.Retention,
		Replicas:     o.Replicas,
		MaxMsgs:      -1,
		MaxBytes:     -1,
		MaxMsgSize:   -1,
		MaxConsumers: ArchiveMaxConsumers,
	}
}
