package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
)

// Provision creates RX_MOVEMENTS or brings an existing one to the settings
// of central.StreamConfig(o), and returns what it changed in words, one
// entry per setting ("created stream RX_MOVEMENTS", "duplicate_window:
// 2m0s -> 10m0s"); nothing when the stream was already as wanted. Settings
// that central.StreamConfig does not manage (placement, metadata, consumer
// limits) are kept as they are on an existing stream. When the server refuses an update
// (some settings, such as storage, cannot change), the error comes with the
// changes that were asked for. It works against any server on which the
// caller may read, create and update RX_MOVEMENTS. It then creates the
// fleet view's stream, KV_RX_FLEET, when it is missing.
func Provision(ctx context.Context, js jetstream.JetStream, o central.StreamOptions) (changes []string, err error) {
	changes, err = provisionMovements(ctx, js, o)
	if err != nil {
		return changes, err
	}
	fleet, err := provisionFleet(ctx, js, o.Replicas)
	return append(changes, fleet...), err
}

// provisionFleet creates the fleet view's stream (central.FleetStreamConfig)
// when it is missing; an existing one is left as it is.
func provisionFleet(ctx context.Context, js jetstream.JetStream, replicas int) ([]string, error) {
	_, err := js.Stream(ctx, central.FleetStreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, central.FleetStreamConfig(replicas)); err != nil {
			return nil, fmt.Errorf("hub: create stream %s: %w", central.FleetStreamName, err)
		}
		return []string{"created stream " + central.FleetStreamName}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hub: read stream %s: %w", central.FleetStreamName, err)
	}
	return nil, nil
}

func provisionMovements(ctx context.Context, js jetstream.JetStream, o central.StreamOptions) (changes []string, err error) {
	want := central.StreamConfig(o)
	s, err := js.Stream(ctx, central.StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return nil, fmt.Errorf("hub: create stream %s: %w", central.StreamName, err)
		}
		return []string{"created stream " + central.StreamName}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hub: read stream %s: %w", central.StreamName, err)
	}
	have := s.CachedInfo().Config
	changes = diff(have, want)
	if len(changes) == 0 {
		return nil, nil
	}
	next := have
	apply(&next, want)
	if _, err := js.UpdateStream(ctx, next); err != nil {
		return changes, fmt.Errorf("hub: update stream %s (%s): %w", central.StreamName, strings.Join(changes, ", "), err)
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
