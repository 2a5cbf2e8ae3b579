package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
)

// MinRetention is the shortest archive retention `hq provision`
// accepts unless told the central is a test: records of controlled
// substances must be kept for two years (21 CFR 1304.04).
const MinRetention = 730 * 24 * time.Hour

// CheckOptions refuses stream options provision must not apply, in the
// words of hq provision's flags: replicas outside 1 to 5, a number of
// partitions central does not support, an archive kept less than
// MinRetention (unless allowShort, for test centrals), or a dedupe horizon
// not shorter than the retention.
func CheckOptions(o central.StreamOptions, allowShort bool) error {
	switch {
	case o.Replicas < 1 || o.Replicas > 5:
		return errors.New("--replicas must be between 1 and 5 (3 for a production cluster)")
	case o.Partitions < 1 || o.Partitions > central.MaxPartitions:
		return fmt.Errorf("--partitions must be between 1 and %d", central.MaxPartitions)
	case o.Retention < MinRetention && !allowShort:
		return fmt.Errorf("--retention %s is shorter than %s: records of controlled substances must be kept for two years", o.Retention, MinRetention)
	case o.MaxAge <= 0 || o.Retention <= o.MaxAge:
		return errors.New("--max-age must be positive and shorter than --retention")
	}
	return nil
}

// Provision brings central to the layout o describes: for every partition
// of o.Partitions (0 means 1), the movement stream (central.StreamConfig)
// and its archive (central.ArchiveConfig); then the fleet view's stream,
// KV_RX_FLEET, when it is missing; then the witness stream, RX_WITNESS
// (central.WitnessStreamConfig), where head office's witness publishes
// the checkpoints it countersigned. It creates what is missing, brings the
// settings it manages to the wanted values on what exists, and returns
// each change in words ("created stream RX_ARCHIVE", "RX_MOVEMENTS:
// duplicate_window: 2m0s -> 10m0s"); nothing when all was as wanted.
// Settings it does not manage (placement, metadata, consumer limits) are
// kept. When the server refuses an update (storage, for one, cannot
// change), the error comes with the changes that were asked for. It works
// against any server on which the caller may read, create and update
// those streams.
//
// Provision never has the server age out a movement that the archive has
// not copied: when a movement stream's max_age would become shorter (as a
// stream from before the archive, with 90 days, becomes one with the
// 35-day horizon), it keeps the old max_age until the archive has caught
// up with the stream (caughtUp), says so ("RX_MOVEMENTS: kept max_age …
// run provision again"), and lowers it on a later run.
func Provision(ctx context.Context, js jetstream.JetStream, o central.StreamOptions) (changes []string, err error) {
	n := max(o.Partitions, 1)
	for p := range n {
		po := o
		po.Partitions, po.Partition = n, p
		c, err := provisionPartition(ctx, js, po)
		changes = append(changes, c...)
		if err != nil {
			return changes, err
		}
	}
	fleet, err := provisionFleet(ctx, js, o.Replicas)
	changes = append(changes, fleet...)
	if err != nil {
		return changes, err
	}
	keep, kept := keepRetention(o)
	wcfg := central.WitnessStreamConfig(o)
	witness, err := ensure(ctx, js, wcfg, func(have jetstream.StreamConfig) jetstream.StreamConfig { return keep(wcfg, have) })
	return append(append(changes, witness...), kept()...), err
}

// keepRetention is the target of an archive's or the witness stream's
// update: the wanted configuration, with the stream's own max_age where
// that is longer than o.Retention and o.LowerRetention is not set, since
// a lower max_age has the server delete at once every record older than
// it, records the law may still require. kept says, in words, what each
// call kept.
func keepRetention(o central.StreamOptions) (target func(want, have jetstream.StreamConfig) jetstream.StreamConfig, kept func() []string) {
	var notes []string
	target = func(want, have jetstream.StreamConfig) jetstream.StreamConfig {
		if o.LowerRetention || !shorter(want.MaxAge, have.MaxAge) {
			return want
		}
		notes = append(notes, fmt.Sprintf("%s: kept max_age %s, longer than the retention asked (%s): lowering it deletes every record older at once; give --lower-retention to lower it",
			want.Name, have.MaxAge, want.MaxAge))
		want.MaxAge = have.MaxAge
		return want
	}
	return target, func() []string { n := notes; notes = nil; return n }
}

// provisionPartition provisions the movement stream and the archive of
// the partition o names, in that order, and lowers the movement stream's
// max_age last, once the archive holds what that would age out.
func provisionPartition(ctx context.Context, js jetstream.JetStream, o central.StreamOptions) ([]string, error) {
	want := central.StreamConfig(o)
	var (
		hold bool
		kept time.Duration
	)
	changes, err := ensure(ctx, js, want, func(have jetstream.StreamConfig) jetstream.StreamConfig {
		if shorter(want.MaxAge, have.MaxAge) {
			hold, kept = true, have.MaxAge
			w := want
			w.MaxAge = have.MaxAge
			return w
		}
		return want
	})
	if err != nil {
		return changes, err
	}
	archive := central.ArchiveConfig(o)
	keepAge, keptAge := keepRetention(o)
	c, err := ensure(ctx, js, archive, func(have jetstream.StreamConfig) jetstream.StreamConfig { return keepAge(archive, have) })
	changes = append(append(changes, c...), keptAge()...)
	if err != nil || !hold {
		return changes, err
	}
	copied, total, ok, err := caughtUp(ctx, js, want.Name, archive.Name)
	if err != nil {
		return changes, err
	}
	if !ok {
		return append(changes, fmt.Sprintf("%s: kept max_age %s until %s has copied %s (%d of %d); run provision again",
			want.Name, kept, archive.Name, want.Name, copied, total)), nil
	}
	c, err = ensure(ctx, js, want, nil)
	return append(changes, c...), err
}

// shorter tells whether max_age a is shorter than b, where 0 is unlimited.
func shorter(a, b time.Duration) bool {
	switch {
	case a <= 0:
		return false
	case b <= 0:
		return true
	default:
		return a < b
	}
}

// caughtUp reads the movement stream and its archive and judges with
// archiveCaughtUp whether the archive holds every message of the stream.
// It returns the two counts for the report.
func caughtUp(ctx context.Context, js jetstream.JetStream, stream, archive string) (copied, total uint64, ok bool, err error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, false, fmt.Errorf("hub: read stream %s: %w", stream, err)
	}
	total = s.CachedInfo().State.Msgs
	a, err := js.Stream(ctx, archive)
	if err != nil {
		return 0, total, false, fmt.Errorf("hub: read stream %s: %w", archive, err)
	}
	info := a.CachedInfo()
	var src *jetstream.StreamSourceInfo
	for _, si := range info.Sources {
		if si != nil && si.Name == stream {
			src = si
		}
	}
	return info.State.Msgs, total, archiveCaughtUp(total, info.State.Msgs, src), nil
}

// archiveCaughtUp decides whether an archive holding copied messages, with
// src its source info for the movement stream (nil when it has none), holds
// every one of the total messages the movement stream holds, so that the
// stream may age them out. The evidence: the stream is empty; or the
// source has been heard from (one never heard from also shows lag 0),
// reports no error and lag 0 (nats-server sets it, with each message it
// copies, to the messages still pending after it), and the archive holds
// at least as many messages as the stream. An archive only receives the
// stream's messages and keeps them longer, and a key's message is in the
// stream once, so the counts compare.
func archiveCaughtUp(total, copied uint64, src *jetstream.StreamSourceInfo) bool {
	if total == 0 {
		return true
	}
	return src != nil && src.Error == nil && src.Active >= 0 && src.Lag == 0 && copied >= total
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

// ensure creates the stream want names, or brings the managed settings of
// the existing one to those of target(have) (want when target is nil), and
// returns the changes, each prefixed with the stream's name.
func ensure(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, target func(have jetstream.StreamConfig) jetstream.StreamConfig) ([]string, error) {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return nil, fmt.Errorf("hub: create stream %s: %w", want.Name, err)
		}
		return []string{"created stream " + want.Name}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hub: read stream %s: %w", want.Name, err)
	}
	have := s.CachedInfo().Config
	if target != nil {
		want = target(have)
	}
	diffs := diff(have, want)
	if len(diffs) == 0 {
		return nil, nil
	}
	changes := make([]string, len(diffs))
	for i, d := range diffs {
		changes[i] = want.Name + ": " + d
	}
	next := have
	apply(&next, want)
	if _, err := js.UpdateStream(ctx, next); err != nil {
		return changes, fmt.Errorf("hub: update stream %s (%s): %w", want.Name, strings.Join(diffs, ", "), err)
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
		func(c *jetstream.StreamConfig) string { return "[" + strings.Join(c.Subjects, ", ") + "]" },
		func(d, s *jetstream.StreamConfig) { d.Subjects = slices.Clone(s.Subjects) }},
	{"sources",
		func(c *jetstream.StreamConfig) string { return sources(c.Sources) },
		func(d, s *jetstream.StreamConfig) { d.Sources = slices.Clone(s.Sources) }},
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
	{"max_consumers",
		func(c *jetstream.StreamConfig) string { return limit(int64(c.MaxConsumers)) },
		func(d, s *jetstream.StreamConfig) { d.MaxConsumers = s.MaxConsumers }},
}

// sources prints a stream's sources: each stream's name with its subject
// transforms.
func sources(ss []*jetstream.StreamSource) string {
	var out []string
	for _, s := range ss {
		if s == nil {
			continue
		}
		d := s.Name
		if s.FilterSubject != "" {
			d += " " + s.FilterSubject
		}
		for _, t := range s.SubjectTransforms {
			d += " " + t.Source + ">" + t.Destination
		}
		out = append(out, d)
	}
	return "[" + strings.Join(out, ", ") + "]"
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
