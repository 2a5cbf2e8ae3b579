package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Names on the central server that every part of the product agrees on.
const (
	// StreamName is the JetStream stream holding every store's movements.
	StreamName = "RX_MOVEMENTS"
	// SubjectPrefix starts the subject of every movement; see Subject.
	SubjectPrefix = "rx.mv."
	// StreamSubjects is the subject filter of StreamName.
	StreamSubjects = SubjectPrefix + ">"
)

// Defaults of StreamOptions.
const (
	// DefaultDuplicateWindow is how long the server remembers a Nats-Msg-Id.
	// A resend of the same key inside the window is answered with a
	// duplicate PubAck; after it, with error 10071 (wrong last sequence),
	// because the subject already holds its one message.
	DefaultDuplicateWindow = 10 * time.Minute
	// DefaultMaxAge is the dedupe horizon: a key is refused as already
	// stored only while its message is in the stream.
	DefaultMaxAge = 90 * 24 * time.Hour
	// DefaultReplicas suits a single server; a production cluster uses 3.
	DefaultReplicas = 1
)

// Subject returns the subject a store publishes a movement to:
// "rx.mv.<store>.<key>". One subject holds at most one message, which is
// what makes a key stored at most once.
func Subject(store, key string) string {
	return SubjectPrefix + store + "." + key
}

// StreamOptions are the settings of RX_MOVEMENTS that differ between
// deployments. The zero value gives the production settings of one server.
type StreamOptions struct {
	// DuplicateWindow is the Nats-Msg-Id window; 0 means DefaultDuplicateWindow.
	DuplicateWindow time.Duration
	// MaxAge is the dedupe horizon; 0 means DefaultMaxAge.
	MaxAge time.Duration
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
		o.MaxAge = DefaultMaxAge
	}
	if o.Replicas <= 0 {
		o.Replicas = DefaultReplicas
	}
	return o
}

// StreamConfig returns the configuration of RX_MOVEMENTS: one message per
// subject, new messages refused (never old ones evicted) at every limit,
// no deletes or purges through the API, direct get for the digest check and
// atomic batches for backlog drains.
func StreamConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:                 StreamName,
		Description:          "RxEdge inventory movements, one message per store and key",
		Subjects:             []string{StreamSubjects},
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

// Provision creates RX_MOVEMENTS or brings an existing one to the settings
// of StreamConfig(o), and returns what it changed in words, one entry per
// setting ("created stream RX_MOVEMENTS", "duplicate_window: 2m0s ->
// 10m0s"); nothing when the stream was already as wanted. Settings that
// StreamConfig does not manage (placement, metadata, consumer limits) are
// kept as they are on an existing stream. When the server refuses an update
// (some settings, such as storage, cannot change), the error comes with the
// changes that were asked for. It works against any server on which the
// caller may read, create and update RX_MOVEMENTS.
func Provision(ctx context.Context, js jetstream.JetStream, o StreamOptions) (changes []string, err error) {
	want := StreamConfig(o)
	s, err := js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return nil, fmt.Errorf("hub: create stream %s: %w", StreamName, err)
		}
		return []string{"created stream " + StreamName}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hub: read stream %s: %w", StreamName, err)
	}
	have := s.CachedInfo().Config
	changes = diff(have, want)
	if len(changes) == 0 {
		return nil, nil
	}
	next := have
	apply(&next, want)
	if _, err := js.UpdateStream(ctx, next); err != nil {
		return changes, fmt.Errorf("hub: update stream %s (%s): %w", StreamName, strings.Join(changes, ", "), err)
	}
	return changes, nil
}

// managed lists the settings Provision owns, by their JSON names, with how
// to read them for comparison and how to set them.
var managed = []struct {
	name string
	get  func(*jetstream.StreamConfig) string
	set  func(dst, src *jetstream.StreamConfig)
}{
	{"subjects",
		func(c *jetstream.StreamConfig) string { return fmt.Sprint(c.Subjects) },
		func(d, s *jetstream.StreamConfig) { d.Subjects = slices.Clone(s.Subjects) }},
	{"storage",
		func(c *jetstream.StreamConfig) string { return c.Storage.String() },
		func(d, s *jetstream.StreamConfig) { d.Storage = s.Storage }},
	{"retention",
		func(c *jetstream.StreamConfig) string { return c.Retention.String() },
		func(d, s *jetstream.StreamConfig) { d.Retention = s.Retention }},
	{"max_msgs_per_subject",
		func(c *jetstream.StreamConfig) string { return limit(c.MaxMsgsPerSubject) },
		func(d, s *jetstream.StreamConfig) { d.MaxMsgsPerSubject = s.MaxMsgsPerSubject }},
	{"discard",
		func(c *jetstream.StreamConfig) string { return c.Discard.String() },
		func(d, s *jetstream.StreamConfig) { d.Discard = s.Discard }},
	{"discard_new_per_subject",
		func(c *jetstream.StreamConfig) string { return fmt.Sprint(c.DiscardNewPerSubject) },
		func(d, s *jetstream.StreamConfig) { d.DiscardNewPerSubject = s.DiscardNewPerSubject }},
	{"deny_delete",
		func(c *jetstream.StreamConfig) string { return fmt.Sprint(c.DenyDelete) },
		func(d, s *jetstream.StreamConfig) { d.DenyDelete = s.DenyDelete }},
	{"deny_purge",
		func(c *jetstream.StreamConfig) string { return fmt.Sprint(c.DenyPurge) },
		func(d, s *jetstream.StreamConfig) { d.DenyPurge = s.DenyPurge }},
	{"allow_direct",
		func(c *jetstream.StreamConfig) string { return fmt.Sprint(c.AllowDirect) },
		func(d, s *jetstream.StreamConfig) { d.AllowDirect = s.AllowDirect }},
	{"allow_atomic",
		func(c *jetstream.StreamConfig) string { return fmt.Sprint(c.AllowAtomicPublish) },
		func(d, s *jetstream.StreamConfig) { d.AllowAtomicPublish = s.AllowAtomicPublish }},
	{"duplicate_window",
		func(c *jetstream.StreamConfig) string { return c.Duplicates.String() },
		func(d, s *jetstream.StreamConfig) { d.Duplicates = s.Duplicates }},
	{"max_age",
		func(c *jetstream.StreamConfig) string { return c.MaxAge.String() },
		func(d, s *jetstream.StreamConfig) { d.MaxAge = s.MaxAge }},
	{"num_replicas",
		func(c *jetstream.StreamConfig) string { return fmt.Sprint(max(c.Replicas, 1)) },
		func(d, s *jetstream.StreamConfig) { d.Replicas = s.Replicas }},
	{"max_msgs",
		func(c *jetstream.StreamConfig) string { return limit(c.MaxMsgs) },
		func(d, s *jetstream.StreamConfig) { d.MaxMsgs = s.MaxMsgs }},
	{"max_bytes",
		func(c *jetstream.StreamConfig) string { return limit(c.MaxBytes) },
		func(d, s *jetstream.StreamConfig) { d.MaxBytes = s.MaxBytes }},
	{"max_msg_size",
		func(c *jetstream.StreamConfig) string { return limit(int64(c.MaxMsgSize)) },
		func(d, s *jetstream.StreamConfig) { d.MaxMsgSize = s.MaxMsgSize }},
}

// limit prints a stream limit, where the server stores "none" as -1 or 0.
func limit(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// diff describes each managed setting that differs between have and want.
func diff(have, want jetstream.StreamConfig) []string {
	var out []string
	for _, m := range managed {
		h, w := m.get(&have), m.get(&want)
		if h != w {
			out = append(out, fmt.Sprintf("%s: %s -> %s", m.name, h, w))
		}
	}
	return out
}

// apply copies the managed settings of src into dst.
func apply(dst *jetstream.StreamConfig, src jetstream.StreamConfig) {
	for _, m := range managed {
		m.set(dst, &src)
	}
}
