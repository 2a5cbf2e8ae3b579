package audit

import (
	"context"
	"crypto/sha256"
	"fmt"
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
	// at is when the stream stored it.
	at time.Time
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
	if !unhex(l.Key[:], central.KeyOfMsgID(h.Get(central.HeaderMsgID))) || !unhex(l.Digest[:], central.DigestOf(h)) {
		return l, false
	}
	l.Seq = seq
	return l, true
}

// unhex decodes s, hex of exactly len(dst) bytes, into dst; it allocates
// nothing, for it runs for every record of the archive.
func unhex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	var bad byte
	for i := range dst {
		hi, lo := hexValue[s[2*i]], hexValue[s[2*i+1]]
		bad |= hi | lo
		dst[i] = hi<<4 | lo&0x0f
	}
	return bad&0xf0 == 0
}

// hexValue is each byte's value as a hex digit; 0xff for a byte that is
// not one.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	for i, c := range "ABCDEF" {
		t[c] = byte(10 + i)
	}
	return t
}()

// payloadMatches says whether the payload's SHA-256 is the leaf's digest.
func payloadMatches(l ledger.Leaf, data []byte) bool { return sha256.Sum256(data) == l.Digest }

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
	return scanStream(ctx, js, scanSpec{stream: name, prefix: prefix, from: from, last: last, subjects: subjects, headersOnly: headersOnly}, fn, progress)
}

// scanSpec is what scanStream reads.
type scanSpec struct {
	stream, prefix string
	// from is the first stream sequence to read; 0 reads from since
	// when it is set, else from the start.
	from  uint64
	since time.Time
	// last is the last stream sequence to read.
	last     uint64
	subjects []string
	// headersOnly leaves the payloads on the server.
	headersOnly bool
	// max, when set, stops the read after that many messages.
	max uint64
}

// scanStream reads a stream in order with an ordered consumer, calling fn
// for each message on a subject prefix<store>; progress gets the
// messages read. It returns how many it read.
func scanStream(ctx context.Context, js jetstream.JetStream, sp scanSpec, fn func(record) error, progress func(uint64)) (uint64, error) {
	name := sp.stream
	if sp.last == 0 || sp.from > sp.last {
		return 0, nil
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("audit: stream %s: %w", name, err)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: sp.subjects, HeadersOnly: sp.headersOnly, InactiveThreshold: time.Minute}
	switch {
	case sp.from > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, sp.from
	case !sp.since.IsZero():
		since := sp.since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
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
	batch := 4096
	if sp.max > 0 && sp.max < uint64(batch) {
		batch = int(sp.max)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(batch))
	if err != nil {
		return 0, fmt.Errorf("audit: read %s: %w", name, err)
	}
	defer it.Stop()
	return readMessages(ctx, it, sp, fn, progress)
}

// readMessages is scanStream's loop over what the consumer delivers.
func readMessages(ctx context.Context, it jetstream.MessagesContext, sp scanSpec, fn func(record) error, progress func(uint64)) (uint64, error) {
	name := sp.stream
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
		if meta.Sequence.Stream > sp.last {
			break
		}
		n++
		if store, ok := strings.CutPrefix(m.Subject(), sp.prefix); ok {
			r := record{stream: name, streamSeq: meta.Sequence.Stream, store: store, h: m.Headers(), at: meta.Timestamp}
			if !sp.headersOnly {
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
		if meta.NumPending == 0 || meta.Sequence.Stream >= sp.last || sp.max > 0 && n >= sp.max {
			break
		}
	}
	if progress != nil {
		progress(n)
	}
	return n, nil
}
