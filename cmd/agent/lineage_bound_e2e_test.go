//go:build unix

// The lineage check's bound on records it cannot verify, with the built
// agent and a real nats-server.

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
)

// forgeSummary writes a fleet summary of the store naming file with
// highest sequence seq (as the store's own credentials, central's
// administrator or a tool could), and waits until central answers it.
func (r *lineageRig) forgeSummary(seq uint64, file string) {
	r.t.Helper()
	b, err := json.Marshal(command.Summary{StoreID: runStore, HighestSeq: seq, FileID: file})
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.nc.PublishMsg(&nats.Msg{Subject: central.FleetSubject(runStore), Data: b}); err != nil {
		r.t.Fatal(err)
	}
	r.waitSummary(seq)
}

// wantImplausibleSummary fails unless the start's lineage check skipped
// the fleet summary, and only it, as implausible, and the agent logged it
// once.
func wantImplausibleSummary(t *testing.T, c *child, st *status.Status) {
	t.Helper()
	chk := st.DataFile.Lineage.Check
	if chk.From != lineage.FromMovement || chk.Skipped != 1 || len(chk.SkippedRecords) != 1 ||
		chk.SkippedRecords[0].Where != lineage.WhereSummary || chk.SkippedRecords[0].Reason != lineage.SkipImplausible {
		t.Fatalf("lineage check %+v, want the summary skipped as %s and the last movement taken", chk, lineage.SkipImplausible)
	}
	if n := strings.Count(c.logText(), "LINEAGE_RECORD_SKIPPED"); n != 1 {
		t.Errorf("LINEAGE_RECORD_SKIPPED logged %d times, want once", n)
	}
}

// TestLineageForgedSummaryPastTheRange: a forged fleet summary names the
// store's own data file with highest sequence 2^53. Before, the agent's
// next start took the file for a restored copy and continued after 2^53:
// from then on every start skipped the store's own records as out of
// range, and a replacement PC, finding nothing it could take, gave
// sequences 1.. again. Now the summary is skipped as implausible
// (reported in the log, the journal and the status), the store goes on
// from its own sequences, and a replacement PC started while the forgery
// is the newest summary continues after the store's last movement:
// central holds every sequence once.
func TestLineageForgedSummaryPastTheRange(t *testing.T) {
	r := newLineageRig(t)
	c := r.start()
	r.submit(c, 20)
	st := r.waitStatus("20 synced", func(s *status.Status) bool { return s.Counts.Synced.Total == 20 })
	file := st.DataFile.Lineage.FileID
	r.waitSummary(20)
	r.stop(c)

	r.forgeSummary(queue.MaxSeq, file)
	c = r.start()
	r.submit(c, 5)
	st = r.waitStatus("the lineage check done and 25 synced", func(s *status.Status) bool {
		l := s.DataFile.Lineage
		return l != nil && l.Check != nil && l.Check.State == status.LineageDone && s.Counts.Synced.Total == 25 && s.Counts.Pending.Total == 0
	})
	if l := st.DataFile.Lineage; l.FileID != file || l.Origin == queue.OriginRestored || st.HighestSeq != 25 {
		t.Fatalf("after the forged summary: lineage %+v, highest %d; want file %s going on at 25", l, st.HighestSeq, file)
	}
	wantImplausibleSummary(t, c, st)
	r.waitSummary(25)
	r.stop(c)

	// The PC is replaced while the forgery is the newest summary.
	r.forgeSummary(queue.MaxSeq, file)
	r.dataDir += "-replacement"
	c = r.start()
	r.submit(c, 3)
	st = r.waitStatus("the replacement's 3 movements synced", func(s *status.Status) bool {
		return s.Counts.Synced.Total == 3 && s.Counts.Pending.Total == 0
	})
	if l := st.DataFile.Lineage; l.Origin != queue.OriginReplaced || l.Prev != file || l.Base != 25 || st.HighestSeq != 28 {
		t.Fatalf("replacement's lineage %+v, highest %d; want replaced after %s at 25, highest 28", l, st.HighestSeq, file)
	}
	wantImplausibleSummary(t, c, st)
	r.stop(c)

	h, _ := r.centralHeld(28)
	h.noReuse(t)
	for seq := uint64(1); seq <= 28; seq++ {
		if len(h[seq]) != 1 {
			t.Errorf("sequence %d stored %d times, want once", seq, len(h[seq]))
		}
	}
	if len(h) != 28 {
		t.Errorf("central holds %d sequences, want 1..28", len(h))
	}
}
