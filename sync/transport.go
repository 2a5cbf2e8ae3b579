package sync

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/queue"
)

// message builds the central message of a pending movement of the file
// whose lineage is l; lineage sends the file's lineage headers whatever
// the movement's sequence (the first message of an atomic batch).
func message(store string, l queue.Lineage, r *queue.Record, lineage bool) *nats.Msg {
	return movementOf(store, l, r, lineage).Msg()
}

// movementOf is what message sends.
func movementOf(store string, l queue.Lineage, r *queue.Record, lineage bool) central.Message {
	f := central.FileLineage{ID: l.FileID}
	if l.Origin == queue.OriginReplaced || l.Origin == queue.OriginRestored {
		f.Prev, f.Base, f.Origin = l.Prev, l.Base, l.Origin
	}
	return central.Message{
		File:       f,
		Store:      store,
		Key:        r.KeyString(),
		Digest:     hex.EncodeToString(r.Digest[:]),
		Seq:        r.Seq,
		EnqueuedAt: r.EnqueuedAt,
		Payload:    r.Payload,
		Lineage:    lineage,
	}
}

// future is a publish waiting for its acknowledgement.
type future interface {
	Ok() <-chan *jetstream.PubAck
	Err() <-chan error
}

// transport is what the sender needs of central. The production transport
// is JetStream over a nats.go connection.
type transport interface {
	// publishAsync sends one message; the future resolves with central's
	// acknowledgement, an error, or a timeout.
	publishAsync(m *nats.Msg) (future, error)
	// publishBatch sends an atomic batch and returns the stream sequence of
	// its last message.
	publishBatch(ctx context.Context, msgs []*nats.Msg) (uint64, error)
	// lastDigest reads the message stored for subject: its Rx-Digest and
	// stream sequence; errNotStored when there is none.
	lastDigest(ctx context.Context, subject string) (string, uint64, error)
	// maxPayload is the largest message the server takes (0 = unknown).
	maxPayload() int64
	// alive asks central whether it answers publishes for the store; nil
	// when it answered (see alive.go).
	alive(ctx context.Context, store string) error
}

var errNotStored = errors.New("sync: no message stored for the subject")

// jsTransport is the transport over a real connection.
type jsTransport struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func newJSTransport(nc *nats.Conn, maxPending int, attemptTimeout time.Duration) (*jsTransport, error) {
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncTimeout(attemptTimeout),
		jetstream.WithDefaultTimeout(attemptTimeout))
	if err != nil {
		return nil, err
	}
	return &jsTransport{nc: nc, js: js}, nil
}

func (t *jsTransport) publishAsync(m *nats.Msg) (future, error) {
	// No publish retries on "no responders": the sender decides.
	return t.js.PublishMsgAsync(m, jetstream.WithRetryAttempts(0), jetstream.WithStallWait(time.Second))
}

func (t *jsTransport) maxPayload() int64 { return t.nc.MaxPayload() }

// publishBatch implements JetStream's atomic batch publish (the protocol of
// orbit.go's jetstreamext.PublishMsgBatch) with a UUIDv7 batch id, so a
// batch can be traced by time in central's advisories; batchID writes it
// in 22 characters, as every message of the batch carries it. The first
// message is acknowledged before the rest are sent (flow control); the
// last carries the commit and its reply is the batch's acknowledgement.
func (t *jsTransport) publishBatch(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
	batchID, err := newBatchID()
	if err != nil {
		return 0, err
	}
	for i, m := range msgs {
		m.Reply = ""
		m.Header.Del(central.HeaderBatchCommit)
		m.Header.Set(central.HeaderBatchID, batchID)
		m.Header.Set(central.HeaderBatchSeq, strconv.Itoa(i+1))
		last := i == len(msgs)-1
		switch {
		case last:
			m.Header.Set(central.HeaderBatchCommit, "1")
			resp, err := t.nc.RequestMsgWithContext(ctx, m)
			if err != nil {
				return 0, err
			}
			var ack struct {
				Stream string              `json:"stream"`
				Seq    uint64              `json:"seq"`
				Batch  string              `json:"batch"`
				Count  int                 `json:"count"`
				Error  *jetstream.APIError `json:"error"`
			}
			if err := json.Unmarshal(resp.Data, &ack); err != nil {
				return 0, fmt.Errorf("sync: batch acknowledgement: %w", err)
			}
			if ack.Error != nil {
				return 0, ack.Error
			}
			if ack.Batch != batchID || ack.Count != len(msgs) || ack.Stream == "" {
				return 0, fmt.Errorf("sync: batch acknowledgement for %q with %d messages, want %q with %d", ack.Batch, ack.Count, batchID, len(msgs))
			}
			return ack.Seq, nil
		case i == 0:
			// Flow control: the server has taken the batch's first message.
			resp, err := t.nc.RequestMsgWithContext(ctx, m)
			if err != nil {
				return 0, err
			}
			if len(resp.Data) > 0 {
				var r struct {
					Error *jetstream.APIError `json:"error"`
				}
				if json.Unmarshal(resp.Data, &r) == nil && r.Error != nil {
					return 0, r.Error
				}
			}
		default:
			if err := t.nc.PublishMsg(m); err != nil {
				return 0, err
			}
		}
	}
	return 0, errors.New("sync: empty batch")
}

// lastDigest reads the last message of subject with a direct get
// ($JS.API.DIRECT.GET.<stream>.<subject>), which an agent's permissions
// allow for its own subjects only; it needs no stream-info permission.
func (t *jsTransport) lastDigest(ctx context.Context, subject string) (string, uint64, error) {
	resp, err := t.nc.RequestWithContext(ctx, central.DirectGetSubject(subject), nil)
	if err != nil {
		return "", 0, err
	}
	if st := resp.Header.Get("Status"); st != "" {
		if st == "404" {
			return "", 0, errNotStored
		}
		return "", 0, fmt.Errorf("sync: direct get %s: status %s %s", subject, st, resp.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(resp.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("sync: direct get %s: no stream sequence", subject)
	}
	return central.DigestOf(resp.Header), seq, nil
}

// newBatchID is a UUIDv7 in unpadded base64url: 22 characters instead of
// 36, unguessable (74 random bits; batches of every store share the
// stream's batch ids) and still ordered by time where decoded.
func newBatchID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(id[:]), nil
}
