package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
)

// record is one archive message, as the reads see it.
type record struct {
	stream    string
	streamSeq uint64
	store     string
	// token is the checkpoint token when the message is a checkpoint.
	token string
	h     nats.Header
	data  []byte // nil on a headers-only read
}

// isCheckpoint says whether the message is a checkpoint, not a movement:
// a checkpoint's message id is its token (ledger.CheckpointToken).
func checkpointToken(h nats.Header) (string, bool) {
	id := h.Get(central.HeaderMsgID)
	return id, ledger.IsCheckpointToken(id)
}

// leafOf reads a movement's leaf from its headers: the sequence, the key
// (of the message id) and the digest. ok is false when one is not there
// or not of its form.
func leafOf(h nats.Header) (ledger.Leaf, bool) {
	var l ledger.Leaf
	seq, err := strconv.ParseUint(h.Get(central.HeaderSeq), 10, 64)
	if err != nil || seq == 0 {
		return l, false
	}
	k, kerr := hex.DecodeString(central.KeyOfMsgID(h.Get(central.HeaderMsgID)))
	d, derr := hex.DecodeString(central.DigestOf(h))
	if kerr != nil || derr != nil || len(k) != len(l.Key) || len(d) != len(l.Digest) {
		return l, false
	}
	l.Seq = seq
	copy(l.Key[:], k)
	copy(l.Digest[:], d)
	return l, true
}

// payloadMatches says whether the payload's SHA-256 is the leaf's digest.
func payloadMatches(l ledger.Leaf, data []byte) bool { return sha256.Sum256(data) == l.Digest }

// archiveStreams lists the archive streams that exist, sorted: those of
// names when it is not nil, else every archive the server lists.
func archiveStreams(ctx context.Context, js jetstream.JetStream, names []string) ([]string, error) {
	var out []string
	if names != nil {
		for _, name := range names {
			_, err := js.Stream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("audit: stream %s: %w", name, err)
			}
			out = append(out, name)
		}
	} else {
		l := js.StreamNames(ctx)
		for name := range l.Name() {
			if central.IsArchiveStream(name) {
				out = append(out, name)
			}
		}
		if err := l.Err(); err != nil {
			return nil, fmt.Errorf("audit: list the streams: %w", err)
		}
	}
	slices.Sort(out)
	return out, nil
}

// lastSeqs is each stream's last sequence when a read began: every later
// read stops there, so the reads see the same archive.
type lastSeqs map[string]uint64

func snapshotLast(ctx context.Context, js jetstream.JetStream, names []string) (lastSeqs, uint64, error) {
	out := lastSeqs{}
	var total uint64
	for _, name := range names {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, 0, fmt.Errorf("audit: stream %s: %w", name, err)
		}
		out[name] = st.CachedInfo().State.LastSeq
		total += st.CachedInfo().State.Msgs
	}
	return out, total, nil
}

// scan reads stream name from its start up to last, in order, with an
// ordered consumer (headers only when headersOnly), calling fn for each
// message on a store's archive subject; progress gets the messages read.
func scan(ctx context.Context, js jetstream.JetStream, name string, last uint64, subjects []string, headersOnly bool,
	fn func(record) error, progress func(uint64)) (uint64, error) {
	return scanPrefix(ctx, js, name, central.ArchivePrefix, 0, last, subjects, headersOnly, fn, progress)
}

// scanPrefix is scan for a stream whose subjects are prefix<store>,
// from stream sequence from (0: the start).
func scanPrefix(ctx context.Context, js jetstream.JetStream, name, prefix string, from, last uint64, subjects []string, headersOnly bool,
	fn func(record) error, progress func(uint64)) (uint64, error) {
	if last == 0 || from > last {
		return 0, nil
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("audit: stream %s: %w", name, err)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, HeadersOnly: headersOnly, InactiveThreshold: time.Minute}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("audit: read %s: %w", name, err)
	}
	// Deleted when done, not left to its inactivity threshold: an archive
	// allows central.ArchiveMaxConsumers at once.
	defer func() { _ = st.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name) }()
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("audit: read %s: %w", name, err)
	}
	if info.NumPending == 0 {
		return 0, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return 0, fmt.Errorf("audit: read %s: %w", name, err)
	}
	defer it.Stop()
	var n uint64
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return n, fmt.Errorf("audit: read %s: stopped after %d records: %w", name, n, ctx.Err())
			}
			return n, fmt.Errorf("audit: read %s after %d records: %w", name, n, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return n, fmt.Errorf("audit: read %s: %w", name, err)
		}
		if meta.Sequence.Stream > last {
			break
		}
		n++
		if store, ok := strings.CutPrefix(m.Subject(), prefix); ok {
			r := record{stream: name, streamSeq: meta.Sequence.Stream, store: store, h: m.Headers()}
			if !headersOnly {
				r.data = m.Data()
			}
			r.token, _ = checkpointToken(r.h)
			if !ledger.IsCheckpointToken(r.token) {
				r.token = ""
			}
			if err := fn(r); err != nil {
				return n, err
			}
		}
		if progress != nil && n%8192 == 0 {
			progress(n)
		}
		if meta.NumPending == 0 || meta.Sequence.Stream >= last {
			break
		}
	}
	if progress != nil {
		progress(n)
	}
	return n, nil
}
