package remote

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
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

// SummaryOf condenses a status document.
func SummaryOf(st *status.Status) command.Summary {
	s := command.Summary{
		StoreID:               st.StoreID,
		State:                 st.Connection.State,
		Reason:                st.Connection.Reason,
		Pending:               st.Counts.Pending.Total,
		PendingControlled:     st.Counts.Pending.Controlled,
		Quarantined:           st.Counts.Quarantined.Total,
		QuarantinedControlled: st.Counts.Quarantined.Controlled,
		SyncedTotal:           st.SyncedTotal,
		HighestSeq:            st.HighestSeq,
		FileID:                fileID(st),
		LastSyncAt:            st.Connection.LastSyncAt,
		Version:               st.Agent.Version,
		GeneratedAt:           st.GeneratedAt,
		Features:              features,
	}
	if st.OldestPendingAt != nil {
		age := st.OldestPendingAge
		s.OldestPendingAge = &age
	}
	if p := st.Connection.Problem; p != nil {
		s.Problem = p.Reason
	}
	if st.DataFile.Path != "" {
		free := st.DataFile.FreeBytes
		s.FreeDiskBytes = &free
	}
	if l := st.DataFile.Lineage; l != nil {
		s.FileOrigin, s.RestoredAt = l.Origin, l.RestoredAt
		switch {
		case l.Foreign != "":
			s.Lineage = status.LineageHeld
		case l.Check != nil:
			s.Lineage = l.Check.State
		}
	}
	if lg := st.Ledger; lg != nil && lg.Published > 0 {
		s.CheckpointLog, s.CheckpointSize, s.CheckpointAt = lg.Log, lg.Published, lg.LastCheckpointAt
	}
	return s
}

// features are what this agent accepts beyond the first form of the
// commands (command.Summary.Features).
var features = []string{command.FeatureRedriveActor}

func fileID(st *status.Status) string {
	if l := st.DataFile.Lineage; l != nil {
		return l.FileID
	}
	return ""
}
