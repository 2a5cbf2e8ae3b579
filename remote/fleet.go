package remote

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/status"
)

// PublishSummary writes the store's summary into the fleet view
// (central.FleetBucket, under the store's own key) and waits for central's
// acknowledgement. The agent calls it with every heartbeat.
func PublishSummary(ctx context.Context, nc *nats.Conn, store string, st *status.Status) error {
	b, err := json.Marshal(SummaryOf(st))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.Publish(ctx, central.FleetSubject(store), b); err != nil {
		return fmt.Errorf("remote: write the fleet summary of %s: %w", store, err)
	}
	return nil
}

// FleetEntry is one key of the fleet view as central holds it. Store is
// the key, which only that store's identity can write; LastSeen is the
// server's time of the write.
type FleetEntry struct {
	Store    string
	LastSeen time.Time
	Value    []byte
}

// ReadFleet reads the latest summary of every store from the fleet view,
// with direct gets (no consumer, no stream info).
func ReadFleet(ctx context.Context, nc *nats.Conn) ([]FleetEntry, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return ReadFleetWith(ctx, js)
}

// ReadFleetWith is ReadFleet through js, for an identity whose JetStream
// API has another prefix.
func ReadFleetWith(ctx context.Context, js jetstream.JetStream) ([]FleetEntry, error) {
	msgs, err := jetstreamext.GetLastMsgsFor(ctx, js, central.FleetStreamName, []string{central.FleetSubjects})
	if err != nil {
		return nil, fmt.Errorf("remote: read the fleet view: %w", err)
	}
	var out []FleetEntry
	for m, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("remote: read the fleet view (%s): %w", central.FleetStreamName, err)
		}
		out = append(out, FleetEntry{Store: strings.TrimPrefix(m.Subject, central.FleetPrefix), LastSeen: m.Time, Value: m.Data})
	}
	return out, nil
}

// Fleet states of a store, from the best to the worst.
const (
	FleetOK           = "ok"
	FleetAttention    = "needs_attention" // it reports quarantined or old movements, or a paused sender
	FleetStale        = "stale"           // not seen for longer than the stale limit
	FleetSilent       = "silent"          // not seen for longer than the silent limit
	FleetMissing      = "missing"         // on the roster, never seen
	FleetUnverifiable = "unverifiable"    // its value does not read, or names another store
	FleetUnknown      = "unknown"         // seen, but not on the roster
)

// FleetStore is one store's line of the fleet view.
type FleetStore struct {
	Store    string     `json:"store"`
	State    string     `json:"state"`
	LastSeen *time.Time `json:"last_seen,omitempty"`
	Summary  *Summary   `json:"summary,omitempty"`
	Problems []string   `json:"problems,omitempty"`
}

// FleetLimits say when a store is stale or silent, and when its
// movements need attention.
type FleetLimits struct {
	Stale, Silent, MaxAge time.Duration
}

// JudgeFleet turns the entries of the fleet view and a roster (nil: no
// roster) into one line per store, sorted by store: the store id is the
// key's, the last-seen time the server's; a value that names another
// store or does not read is unverifiable. Every state but FleetOK needs
// attention.
func JudgeFleet(entries []FleetEntry, roster []string, now time.Time, l FleetLimits) []FleetStore {
	seen := map[string]bool{}
	var out []FleetStore
	for _, e := range entries {
		seen[e.Store] = true
		at := e.LastSeen
		fs := FleetStore{Store: e.Store, LastSeen: &at, State: FleetOK}
		var s Summary
		switch err := json.Unmarshal(e.Value, &s); {
		case err != nil:
			fs.State, fs.Problems = FleetUnverifiable, []string{"its summary does not read"}
		case s.StoreID != e.Store:
			fs.State, fs.Problems = FleetUnverifiable, []string{fmt.Sprintf("its summary names store %q", clip(s.StoreID))}
		default:
			fs.Summary = &s
		}
		quiet := now.Sub(at)
		switch {
		case fs.State != FleetOK:
		case roster != nil && !slices.Contains(roster, e.Store):
			fs.State, fs.Problems = FleetUnknown, []string{"not on the roster"}
		case quiet > l.Silent:
			fs.State, fs.Problems = FleetSilent, []string{"last seen " + quiet.Round(time.Second).String() + " ago"}
		case quiet > l.Stale:
			fs.State, fs.Problems = FleetStale, []string{"last seen " + quiet.Round(time.Second).String() + " ago"}
		default:
			if p := s.Problems(l.MaxAge); len(p) > 0 {
				fs.State, fs.Problems = FleetAttention, p
			}
		}
		out = append(out, fs)
	}
	for _, r := range roster {
		if !seen[r] {
			out = append(out, FleetStore{Store: r, State: FleetMissing, Problems: []string{"never seen"}})
		}
	}
	slices.SortFunc(out, func(a, b FleetStore) int { return cmp.Compare(a.Store, b.Store) })
	return out
}
