package provision_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/lineage"
)

// TestProductionConfigLineageReads: with the generated configuration, a
// store's agent reads what it needs at start to continue its sequence
// (lineage.Read): the last movement central stored for it, through a
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
			for i, seq := range []string{"7", "5"} {
				m := nats.NewMsg(central.Subject("S0001", fmt.Sprintf("k%d", i)))
				m.Header.Set(central.HeaderMsgID, fmt.Sprintf("k%d", i))
				m.Header.Set(central.HeaderExpectLast, "0")
				m.Header.Set(central.HeaderSeq, seq)
				m.Header.Set(central.HeaderFile, "file-a")
				if _, err := a.js.PublishMsg(testContext(t), m); err != nil {
					t.Fatal(err)
				}
			}
			sum, _ := json.Marshal(command.Summary{StoreID: "S0001", HighestSeq: 9, FileID: "file-a2"})
			if _, err := a.js.Publish(testContext(t), central.FleetSubject("S0001"), sum); err != nil {
				t.Fatal(err)
			}
			sumB, _ := json.Marshal(command.Summary{StoreID: "S0002", HighestSeq: 99, FileID: "file-b"})
			if _, err := b.js.Publish(testContext(t), central.FleetSubject("S0002"), sumB); err != nil {
				t.Fatal(err)
			}

			rec, err := lineage.Read(t.Context(), a.nc, "S0001", 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if rec.LastStored != 5 || rec.LastStoredFile != "file-a" || rec.Summary != 9 || rec.SummaryFile != "file-a2" || rec.SummaryErr != "" {
				t.Fatalf("record = %+v", rec)
			}
			if rec.Highest != 9 || rec.FileID != "file-a2" {
				t.Fatalf("central record = %+v, want 9 from file-a2", rec.CentralRecord)
			}

			// A store with nothing stored reads an empty record.
			recB, err := lineage.Read(t.Context(), b.nc, "S0002", 2*time.Second)
			if err != nil || recB.LastStored != 0 || recB.Summary != 99 {
				t.Fatalf("store B's record = %+v, %v", recB, err)
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
