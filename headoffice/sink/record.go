package sink

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/movement"
)

// Row is one archive message as the sink writes it: a movement, or, when
// Reject is set, a message that is not one.
type Row struct {
	Stream     string
	StreamSeq  uint64
	ArchivedAt time.Time
	Store      string
	// Reject names what is wrong (a header or field, never a value); the
	// fields below it are then unset.
	Reject string
	// Checkpoint marks a store's published checkpoint (central/ledger):
	// not a movement, so neither a row nor a reject; the position moves
	// past it. The fields below it are unset.
	Checkpoint bool

	Key, Digest string
	Seq         uint64
	EnqueuedAt  time.Time // zero when the header is missing
	Payload     []byte
	M           payload
	OccurredAt  time.Time
}

// payload is a movement's canonical encoding, the wire form agents
// publish: the movement model itself, so the sink reads and checks it as
// the agent does.
type payload = movement.Movement

var (
	hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)
	hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// parseRow reads an archive message, its headers in either form (see
// central's headers). Any message becomes a Row: one that
// is not a well-formed movement of its subject's store becomes a reject,
// so the position can move past it and head office sees it.
func parseRow(stream string, streamSeq uint64, archivedAt time.Time, subject string, h map[string][]string, data []byte) Row {
	r := Row{Stream: stream, StreamSeq: streamSeq, ArchivedAt: archivedAt.UTC()}
	store, ok := strings.CutPrefix(subject, central.ArchivePrefix)
	if !ok || !central.ValidStoreID(store) {
		r.Store, r.Reject = "", "subject"
		return r
	}
	r.Store = store
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if ledger.IsCheckpointToken(get(central.HeaderMsgID)) {
		r.Checkpoint = true
		return r
	}
	if !central.StoreAgrees(h, store) {
		r.Reject = "header " + central.HeaderStore
		return r
	}
	seq, err := strconv.ParseUint(get(central.HeaderSeq), 10, 63)
	if err != nil || seq == 0 {
		r.Reject = "header " + central.HeaderSeq
		return r
	}
	key := central.KeyOfMsgID(get(central.HeaderMsgID))
	if !hex32.MatchString(key) {
		r.Reject = "header " + central.HeaderMsgID
		return r
	}
	digest := central.DigestOf(h)
	if !hex64.MatchString(digest) {
		r.Reject = "header " + central.HeaderDigest
		if _, full := h[central.HeaderDigest]; !full {
			r.Reject = "header " + central.HeaderMsgID
		}
		return r
	}
	if len(data) > movement.MaxCanonical {
		r.Reject = "payload size"
		return r
	}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		r.Reject = "payload encoding"
		return r
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != digest {
		r.Reject = "payload digest"
		return r
	}
	enqueued, _ := central.EnqueuedAtOf(h)
	p, field := readPayload(data, store, agentClock(r.ArchivedAt, enqueued))
	if field != "" {
		r.Reject = "payload " + field
		return r
	}
	if movement.KeyString(store, p.MovementID) != key {
		r.Reject = "payload movement_id"
		return r
	}
	at, _ := time.Parse(time.RFC3339Nano, p.OccurredAt)
	r.Key, r.Digest, r.Seq, r.Payload, r.M, r.OccurredAt = key, digest, seq, data, *p, at.UTC()
	if !enqueued.IsZero() {
		r.EnqueuedAt = enqueued.UTC()
	}
	return r
}

// readPayload decodes a payload and checks it as the agent of store
// checked it when it took the movement at time now (movement.Decode and
// Validate): what the agent would refuse, the sink refuses too, so no
// insider's record holds a value no store could have sent (a date before
// 2000 or past the store's clock, an NDC of no form, a DEA form on a
// movement of another schedule). field names what is wrong: "json" for a
// payload that does not decode, else the first field found wrong; "" for
// none. The payload must name its store, as the agent's canonical
// encoding always does.
func readPayload(data []byte, store string, now time.Time) (*movement.Movement, string) {
	m, es := movement.Decode(data)
	if es != nil {
		return nil, "json"
	}
	if m.StoreID != store {
		return nil, "store_id"
	}
	if es := m.Validate(store, now); es != nil {
		return nil, es[0].Field
	}
	return m, ""
}

// agentClock stands in for the agent's clock when it took a movement, the
// one its check of occurred_at used: central's archive time, or the
// store's Rx-Enqueued-At when that is later, by at most
// movement.MaxFuture. A store's clock may run ahead of central's; a
// header an insider writes cannot move the bound further than that.
func agentClock(archived, enqueued time.Time) time.Time {
	switch limit := archived.Add(movement.MaxFuture); {
	case enqueued.After(limit):
		return limit
	case enqueued.After(archived):
		return enqueued
	}
	return archived
}
