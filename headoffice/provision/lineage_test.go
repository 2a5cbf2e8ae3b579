package provision_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
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

// lineageRead reads S0001's record as its agent does at start.
func lineageRead(t *testing.T, a *client) (last, summary lineage.Claim) {
	t.Helper()
	last, summary, err := lineage.Read(t.Context(), a.nc, "S0001", "", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return last, summary
}

// waitLast waits until the last message on S0001's subjects is the one
// stored under token, and returns what the store takes from it.
func waitLast(t *testing.T, a *client, token string) lineage.Claim {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := a.nc.Request(central.LastMovementSubject("S0001"), nil, 2*time.Second)
		if err == nil {
			if v := m.Header.Values("Nats-Subject"); len(v) > 0 && strings.HasSuffix(v[len(v)-1], "."+token) {
				return lineage.ClassifyLast(m, "S0001", "")
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing stored under %s within 10 s (%v)", token, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// putSummary writes store's fleet summary as c.
func putSummary(t *testing.T, c *client, store string, s command.Summary) {
	t.Helper()
	b, _ := json.Marshal(s)
	if _, err := c.js.Publish(testContext(t), central.FleetSubject(store), b); err != nil {
		t.Fatal(err)
	}
}

// TestProductionConfigLineageOpsAnswers: under the generated
// configuration ops can put records where a store's lineage check reads
// them only as JetStream answers (a reply subject is not checked against
// its permissions), even answers carrying a summary another store wrote
// under this store's id: the check skips each.
func TestProductionConfigLineageOpsAnswers(t *testing.T) {
	const n = 4
	h := startProduction(t, n)
	a := dial(t, h.URL(), storeA)
	b := dial(t, h.URL(), storeB)
	o := dial(t, h.URL(), ops)
	putSummary(t, a, "S0001", command.Summary{StoreID: "S0001", HighestSeq: 5, FileID: uuid.NewString()})

	// An answer on the store's movement subject (its partition's).
	part := central.Partition("S0001", n)
	if err := o.nc.PublishRequest(central.FleetDirectGetSubject("S0001"), central.PartitionSubject(part, n, "S0001", "forged"), nil); err != nil {
		t.Fatal(err)
	}
	if c := waitLast(t, a, "forged"); c.Found != lineage.FoundSkipped || c.Skip != lineage.SkipReflected {
		t.Fatalf("ops's answer on the movement subject: %+v", c)
	}
	// S0002 writes a summary under S0001's id on its own key; ops copies it
	// onto S0001's key.
	putSummary(t, b, "S0002", command.Summary{StoreID: "S0001", HighestSeq: 1 << 40, FileID: uuid.NewString()})
	if err := o.nc.PublishRequest(central.FleetDirectGetSubject("S0002"), central.FleetSubject("S0001"), nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := lineageRead(t, a); s.Found == lineage.FoundSummary; _, s = lineageRead(t, a) {
		if time.Now().After(deadline) {
			t.Fatal("ops's copy was not stored on S0001's key within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, s := lineageRead(t, a); s.Found != lineage.FoundSkipped || s.Skip != lineage.SkipReflected {
		t.Fatalf("another store's summary copied onto S0001's key: %+v", s)
	}
}

// TestProductionConfigLineageMigrateForgeries: migrate, while it exists,
// can publish a movement with any headers on a store's partition subject.
// A huge Rx-Seq is skipped, one far ahead of the store's summary is
// implausible, and a data file the store does not know is reported, not
// held.
func TestProductionConfigLineageMigrateForgeries(t *testing.T) {
	const n = 4
	h := startProduction(t, n)
	a := dial(t, h.URL(), storeA)
	mig := dial(t, h.URL(), identity{"migrate", "CHANGE-ME-migrate", "_INBOX_migrate"})
	fileA := uuid.NewString()
	putSummary(t, a, "S0001", command.Summary{StoreID: "S0001", HighestSeq: 5, FileID: fileA})
	own := queue.Lineage{FileID: fileA, Fence: 10}
	for i, tc := range []struct {
		seq      uint64
		file     string
		skip     string
		reported bool
	}{
		{1<<64 - 1, fileA, lineage.SkipSeqRange, false},
		{1 << 40, fileA, lineage.SkipImplausible, false},
		{8, uuid.NewString(), "", true},
	} {
		p, es := movement.Prepare([]byte(fmt.Sprintf(`{"movement_id":"forged-%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, i)), "S0001", time.Now())
		if es != nil {
			t.Fatal(es)
		}
		m := central.Message{Store: "S0001", Key: p.KeyString(), Digest: hex.EncodeToString(p.Digest[:]), Seq: tc.seq, EnqueuedAt: time.Now(),
			Payload: p.Payload, File: central.FileLineage{ID: tc.file}}.Msg()
		m.Subject = central.PartitionSubject(central.Partition("S0001", n), n, "S0001", p.KeyString())
		if _, err := mig.js.PublishMsg(testContext(t), m); err != nil {
			t.Fatalf("migrate publishes on S0001's partition subject: %v", err)
		}
		waitLast(t, a, p.KeyString())
		last, summary := lineageRead(t, a)
		v := lineage.Decide(lineage.Evidence{File: own, Last: last, Summary: summary})
		skipped := ""
		if len(v.Skipped) == 1 {
			skipped = v.Skipped[0].Skip
		}
		if skipped != tc.skip || v.Hold || (v.Unverified != "") != tc.reported || v.Behind {
			t.Errorf("Rx-Seq %d: %+v", tc.seq, v)
		}
	}
}
