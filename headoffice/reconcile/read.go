package reconcile

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
)

// StreamRead is what was read of one archive stream.
type StreamRead struct {
	Name    string  `json:"name"`
	Records uint64  `json:"records"`
	Seconds float64 `json:"seconds"`
	// MigratedCopies are records skipped as copies made by the move to a
	// partitioned central, whose originals are in the one-partition
	// archive read too (see skipMigrated and archive.isCopy).
	MigratedCopies uint64 `json:"migrated_copies,omitempty"`
}

// tally is what the archive holds for one store.
type tally struct {
	held      Set
	records   uint64
	dupSeqs   Set    // sequences held more than once
	malformed uint64 // records without a usable Rx-Seq, or naming another store
	// floor is, with a --since, the lowest sequence of a record enqueued
	// at or after the start of the window the report checks; 0 when none.
	floor uint64
	// files are the store's data files seen (see lineage.go).
	files        map[string]*fileSeen
	tooManyFiles bool
}

// record is one archive message's identity.
type record struct {
	seq    uint64
	key    [16]byte
	digest [32]byte
	// whole says key and digest read.
	whole      bool
	enqueuedAt time.Time
	file       central.FileLineage
}

// parseRecord reads a message's headers, in either form (see central's
// headers); ok is false when it has no usable Rx-Seq or names a store
// other than its subject's.
func parseRecord(store string, h map[string][]string) (record, bool) {
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	var r record
	seq, err := strconv.ParseUint(get(central.HeaderSeq), 10, 64)
	if err != nil || seq == 0 || !central.StoreAgrees(h, store) {
		return r, false
	}
	r.seq = seq
	k, kerr := hex.DecodeString(central.KeyOfMsgID(get(central.HeaderMsgID)))
	d, derr := hex.DecodeString(central.DigestOf(h))
	if kerr == nil && derr == nil && len(k) == 16 && len(d) == 32 {
		r.key, r.digest, r.whole = [16]byte(k), [32]byte(d), true
	}
	if t, ok := central.EnqueuedAtOf(h); ok {
		r.enqueuedAt = t
	}
	r.file = central.FileLineageOf(h)
	return r, true
}

// readFilter is what readStream reads.
type readFilter struct {
	subjects []string  // nil: every store
	since    time.Time // zero: from the start
	// skip, when set, says whether to skip a record that names itself a
	// copy made by the move to a partitioned central
	// (central.HeaderMigratedFrom); see archive.isCopy.
	skip func(store string, h map[string][]string) bool
}

// skipMigrated says whether the copies the move to a partitioned central
// made are to be skipped in archive name: when the one-partition archive,
// which holds their originals, is read too.
func skipMigrated(names []string, name string) bool {
	return name != central.ArchiveStreamName && slices.Contains(names, central.ArchiveStreamName)
}

// readStream reads one archive stream from its start (or since) up to
// what it held when the read began, headers only, with an ordered
// consumer, calling fn for each message; progress is called with the
// messages read so far, now and then.
func readStream(ctx context.Context, js jetstream.JetStream, name string, f readFilter, fn func(store string, h map[string][]string), progress func(uint64)) (StreamRead, error) {
	start := time.Now()
	out := StreamRead{Name: name}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return out, fmt.Errorf("reconcile: stream %s: %w", name, err)
	}
	last := st.CachedInfo().State.LastSeq
	if st.CachedInfo().State.Msgs == 0 {
		return out, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: f.subjects, HeadersOnly: true, InactiveThreshold: time.Minute}
	if !f.since.IsZero() {
		since := f.since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return out, fmt.Errorf("reconcile: read %s: %w", name, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return out, fmt.Errorf("reconcile: read %s: %w", name, err)
	}
	if info.NumPending == 0 {
		return out, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return out, fmt.Errorf("reconcile: read %s: %w", name, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return out, fmt.Errorf("reconcile: read %s: stopped after %d records: %w", name, out.Records, ctx.Err())
			}
			return out, fmt.Errorf("reconcile: read %s after %d records: %w", name, out.Records, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return out, fmt.Errorf("reconcile: read %s: %w", name, err)
		}
		out.Records++
		store, ok := strings.CutPrefix(m.Subject(), central.ArchivePrefix)
		switch {
		case !ok:
		case ledger.IsCheckpointToken(m.Headers().Get(central.HeaderMsgID)):
			// A store's checkpoint (central/ledger), not a movement.
		case f.skip != nil && m.Headers().Get(central.HeaderMigratedFrom) != "" && f.skip(store, m.Headers()):
			out.MigratedCopies++
		default:
			fn(store, m.Headers())
		}
		if progress != nil && out.Records%8192 == 0 {
			progress(out.Records)
		}
		if meta.NumPending == 0 || meta.Sequence.Stream >= last {
			break
		}
	}
	if progress != nil {
		progress(out.Records)
	}
	out.Seconds = time.Since(start).Seconds()
	return out, nil
}
