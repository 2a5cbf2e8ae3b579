package provision_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/movement"
)

// TestProductionConfigLineageReads: with the generated configuration, a
// store's agent reads what it needs at start to continue its sequence
// (lineage.Read): the last message central stored for it, through a
// wildcard direct get with its own grant, and its own fleet-view summary;
// and it can read neither of another store's.
func TestProductionConfigLineageReads(t *testing.T) {
	for _, n := range layouts {
		t.Run(fmt.Sprintf("partitions=%d", n), func(t *testing.T) {
			h := startProduction(t, n)
			a := dial(t, h.URL(), storeA)
			b := dial(t, h.URL(), storeB)

			// Two movements of A, the higher sequence first: the read is of
			// the last stored, not the highest.
			fileA, fileA2, fileB := uuid.NewString(), uuid.NewString(), uuid.NewString()
			for i, seq := range []uint64{7, 5} {
				p, es := movement.Prepare([]byte(fmt.Sprintf(`{"movement_id":"m%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, i)), "S0001", time.Now())
				if es != nil {
					t.Fatal(es)
				}
				m := central.Message{Store: "S0001", Key: p.KeyString(), Digest: hex.EncodeToString(p.Digest[:]), Seq: seq, EnqueuedAt: time.Now(),
					Payload: p.Payload, File: central.FileLineage{ID: fileA}}.Msg()
				if _, err := a.js.PublishMsg(testContext(t), m); err != nil {
					t.Fatal(err)
				}
			}
			sum, _ := json.Marshal(command.Summary{StoreID: "S0001", HighestSeq: 9, FileID: fileA2})
			if _, err := a.js.Publish(testContext(t), central.FleetSubject("S0001"), sum); err != nil {
				t.Fatal(err)
			}
			sumB, _ := json.Marshal(command.Summary{StoreID: "S0002", HighestSeq: 99, FileID: fileB})
			if _, err := b.js.Publish(testContext(t), central.FleetSubject("S0002"), sumB); err != nil {
				t.Fatal(err)
			}

			last, summary, err := lineage.Read(t.Context(), a.nc, "S0001", "", 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if last.Found != lineage.FoundMovement || last.Seq != 5 || last.File != fileA || summary.Found != lineage.FoundSummary || summary.Seq != 9 || summary.File != fileA2 {
				t.Fatalf("last %+v, summary %+v", last, summary)
			}
			if v := lineage.Decide(lineage.Evidence{Last: last, Summary: summary}); v.Record.Highest != 9 || v.Record.FileID != fileA2 {
				t.Fatalf("central record = %+v, want 9 from the summary's file", v.Record)
			}

			// A store with nothing stored reads no movement.
			lastB, summaryB, err := lineage.Read(t.Context(), b.nc, "S0002", "", 2*time.Second)
			if err != nil || lastB.Found != lineage.FoundNone || summaryB.Seq != 99 {
				t.Fatalf("store B's record: %+v, %+v, %v", lastB, summaryB, err)
			}

			// A cannot read B's summary or B's movements.
			if _, err := a.nc.RequestWithContext(shortContext(t), central.FleetDirectGetSubject("S0002"), nil); err == nil {
				t.Fatal("store A read store B's fleet summary")
			}
			a.wantViolation(t, fmt.Sprintf("Publish to %q", central.FleetDirectGetSubject("S0002")))
			if _, err := a.nc.RequestWithContext(shortContext(t), central.LastMovementSubject("S0002"), nil); err == nil {
				t.Fatal("store A read store B's last movement")
			}
			a.wantViolation(t, fmt.Sprintf("Publish to %q", central.LastMovementSubject("S0002")))
		})
	}
}
