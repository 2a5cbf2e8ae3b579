package central

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The fleet view: every agent writes its summary into the key-value bucket
// FleetBucket under its own store id, with a plain JetStream publish to
// FleetSubject(store); the server lets a store's identity publish only its
// own key. Head office reads the last message of every key: the key names
// the store and the server's timestamp says when it was last seen, so
// nothing a store writes into the value can make it look like another.
const (
	// FleetBucket is the key-value bucket of the fleet's summaries.
	FleetBucket = "RX_FLEET"
	// FleetStreamName is the stream that holds FleetBucket.
	FleetStreamName = "KV_" + FleetBucket
	// FleetPrefix starts every key's subject; see FleetSubject.
	FleetPrefix = "$KV." + FleetBucket + "."
	// FleetSubjects is every store's key.
	FleetSubjects = FleetPrefix + ">"
	// MaxFleetValue bounds one summary.
	MaxFleetValue = 4 << 10
)

// FleetSubject is where the agent of store writes its summary.
func FleetSubject(store string) string { return FleetPrefix + store }

// FleetStreamConfig is the stream of FleetBucket: the latest summary per
// store, kept until an operator removes the store; no rollups (a
// Nats-Rollup header from one store would otherwise wipe every key), no
// deletes or purges through the API, direct get for head office.
func FleetStreamConfig(replicas int) jetstream.StreamConfig {
	if replicas <= 0 {
		replicas = DefaultReplicas
	}
	return jetstream.StreamConfig{
		Name:              FleetStreamName,
		Description:       "RxEdge fleet view: each store's latest summary, under its own key",
		Subjects:          []string{FleetSubjects},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardOld,
		MaxMsgSize:        MaxFleetValue,
		AllowRollup:       false,
		DenyDelete:        true,
		DenyPurge:         true,
		AllowDirect:       true,
		Duplicates:        time.Minute,
		Replicas:          replicas,
		MaxConsumers:      -1,
		MaxMsgs:           -1,
		MaxBytes:          -1,
	}
}

// FleetDirectGetSubject is where the agent of store reads back its own
// summary in the fleet view (the last message of FleetSubject(store)); a
// store's identity is granted this for its own key only.
func FleetDirectGetSubject(store string) string {
	return jetstream.DefaultAPIPrefix + "DIRECT.GET." + FleetStreamName + "." + FleetSubject(store)
}

// LastMovementSubject is where the agent of store reads the last movement
// central stored for it (a direct get of the last message on its
// subjects, within the dedupe horizon), with its own direct-get grant.
func LastMovementSubject(store string) string {
	return DirectGetSubject(Subject(store, "*"))
}
