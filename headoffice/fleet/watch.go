package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
)

// Backoff of the watch when central cannot be read: from watchRetryMin,
// doubling, to watchRetryMax.
const (
	watchRetryMin = time.Second
	watchRetryMax = 30 * time.Second
)

// Run keeps the index up to date until ctx ends: an ordered consumer
// reads the fleet view's last message of every store, then every new one
// as it is written (and, with a witness key, the witness stream's the
// same way, through IndexOptions.WitnessJS); a timer judges every store
// again by time. The consumer
// recovers by itself from a lost connection; when it cannot be made
// (central unreachable, the stream missing) Run reports it and tries
// again with a capped backoff. It returns ctx's error.
func (ix *Index) Run(ctx context.Context, js jetstream.JetStream) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return ix.follow(ctx, js, central.FleetStreamName, central.FleetSubjects, ix.applyFleet, true)
	})
	if ix.o.WitnessKey != "" {
		v, err := note.NewVerifier(ix.o.WitnessKey)
		if err != nil {
			return fmt.Errorf("fleet: the witness key is not a note verifier key: %w", err)
		}
		apply := func(m jetstream.Msg) { ix.applyWitness(m, v) }
		wjs := js
		if ix.o.WitnessJS != nil {
			wjs = ix.o.WitnessJS
		}
		g.Go(func() error {
			return ix.follow(ctx, wjs, central.WitnessStreamName, central.WitnessPrefix+">", apply, false)
		})
	}
	g.Go(func() error {
		t := time.NewTicker(ix.o.Rejudge)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				ix.Rejudge()
			}
		}
	})
	return g.Wait()
}

// follow reads stream's last message of every subject, then the new
// ones, into apply, until ctx ends; signalReady closes Ready once the
// last messages are in.
func (ix *Index) follow(ctx context.Context, js jetstream.JetStream, stream, subjects string, apply func(jetstream.Msg), signalReady bool) error {
	wait := watchRetryMin
	for {
		err := ix.followOnce(ctx, js, stream, subjects, apply, signalReady)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ix.o.Logger.Warn("FLEET_WATCH_FAILED", "stream", stream, "error", err.Error(), "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, watchRetryMax)
	}
}

func (ix *Index) followOnce(ctx context.Context, js jetstream.JetStream, stream, subjects string, apply func(jetstream.Msg), signalReady bool) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("fleet: find stream %s: %w", stream, err)
	}
	if signalReady && s.CachedInfo().State.Msgs == 0 {
		ix.readyOnce.Do(func() { close(ix.ready) })
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subjects},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return fmt.Errorf("fleet: follow stream %s: %w", stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("fleet: follow stream %s: %w", stream, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return ctx.Err()
			}
			return fmt.Errorf("fleet: read stream %s: %w", stream, err)
		}
		apply(m)
		if md, err := m.Metadata(); signalReady && err == nil && md.NumPending == 0 {
			ix.readyOnce.Do(func() { close(ix.ready) })
		}
	}
}

// applyFleet takes one message of the fleet view. Its subject names the
// store (the consumer delivers it on the subject central stored it
// under, which only that store's identity can write); one that is not a
// store id's is counted and passed over. A record that carries the
// headers central adds to a direct get's answer answers for no one
// (Entry.Reflected).
func (ix *Index) applyFleet(m jetstream.Msg) {
	store, ok := strings.CutPrefix(m.Subject(), central.FleetPrefix)
	if !ok || !central.ValidStoreID(store) {
		ix.countUnreadable("FLEET_SUBJECT_UNREADABLE", "the subject is not a store's key")
		return
	}
	at := time.Time{}
	if md, err := m.Metadata(); err == nil {
		at = md.Timestamp
	}
	data := m.Data()
	if len(data) > central.MaxFleetValue {
		data = nil // unverifiable: the bucket never takes one this large
	}
	ix.Apply(Entry{Store: store, LastSeen: at, Value: data, Reflected: central.CarriesServerHeaders(m.Headers())})
}

// applyWitness takes one countersigned checkpoint: kept only when the
// witness's signature verifies and the checkpoint names the store of its
// subject; anything else is counted and passed over (what an insider
// can write chooses nothing).
func (ix *Index) applyWitness(m jetstream.Msg, v note.Verifier) {
	store, _ := strings.CutPrefix(m.Subject(), central.WitnessPrefix)
	n, err := note.Open(m.Data(), note.VerifierList(v))
	if err != nil {
		ix.countUnreadable("WITNESS_RECORD_UNVERIFIED", "the countersignature does not verify")
		return
	}
	c, err := ledger.ParseCheckpoint(n.Text)
	if err != nil || c.Store != store {
		ix.countUnreadable("WITNESS_RECORD_UNVERIFIED", "not a checkpoint of the subject's store")
		return
	}
	ix.Witness(store, Witnessed{Log: c.Log, Size: c.Size})
}

// countUnreadable counts a record passed over; the first of each kind is
// logged, the rest only counted (Stats).
func (ix *Index) countUnreadable(code, why string) {
	ix.mu.Lock()
	ix.stats.Unreadable++
	first := ix.stats.Unreadable == 1
	ix.mu.Unlock()
	if first {
		ix.o.Logger.Warn(code, "why", why)
	}
}
