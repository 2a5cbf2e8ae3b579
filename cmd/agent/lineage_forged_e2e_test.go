//go:build unix

// The lineage check with the built agent against central under the
// generated production permissions, when head office's users of the
// streams' account have put records on the store's movement subjects.

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

// productionLineageRig is a lineageRig whose central runs the generated
// production configuration for runStore and two other stores: the agent
// logs in as its store, the rig reads the archive as the auditor and the
// fleet view as ops, and forges as ops and admin.
type productionLineageRig struct {
	*lineageRig
	ops, admin, store *nats.Conn
}

func newProductionLineageRig(t *testing.T) *productionLineageRig {
	t.Helper()
	t.Setenv("RXEDGE_SYNC_HEARTBEAT_INTERVAL", "200ms")
	t.Setenv("RXEDGE_NATS_USER", runStore)
	t.Setenv("RXEDGE_NATS_PASSWORD", "CHANGE-ME-"+runStore)
	dir := t.TempDir()
	var b bytes.Buffer
	if err := provision.CentralConfig(&b, []string{runStore, "S0108", "S0109"}, 1); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "central.conf")
	if err := os.WriteFile(conf, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := natstest.StartHub(t, natstest.WithConfigFile(conf, nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")))
	as := func(user string) *nats.Conn {
		return natstest.Connect(t, srv.URL(), nats.UserInfo(user, "CHANGE-ME-"+user), nats.CustomInboxPrefix(central.InboxPrefix(user)))
	}
	audit := as("audit")
	ajs, err := jetstream.NewWithAPIPrefix(audit, central.AuditAPIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	r := &productionLineageRig{ops: as("ops"), admin: as("admin"), store: as(runStore)}
	r.lineageRig = &lineageRig{t: t, bin: buildAgent(t), url: srv.URL(), nc: r.ops, js: ajs, dataDir: filepath.Join(dir, "data")}
	return r
}

// forge has nc send a request to api whose reply subject is the store's
// movement subject under token, so that JetStream stores its answer there,
// and waits until that answer is the last message on the store's
// subjects. It returns the answer's sequence in the movement stream.
func (r *productionLineageRig) forge(nc *nats.Conn, api, token string, body []byte) uint64 {
	r.t.Helper()
	if err := nc.PublishRequest(api, central.Subject(runStore, token), body); err != nil {
		r.t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		m, err := r.store.Request(central.LastMovementSubject(runStore), nil, 2*time.Second)
		if err == nil {
			if subj := m.Header.Values(jetstream.SubjectHeader); len(subj) > 0 && subj[len(subj)-1] == central.Subject(runStore, token) {
				c := lineage.ClassifyLast(m, runStore, "")
				if c.Found != lineage.FoundSkipped {
					r.t.Fatalf("the forged record is taken for the store's own: %+v", c)
				}
				return c.StreamSeq
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the answer to %s was not stored on the store's subject %s within 15 s (%v)", api, token, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checked waits for the agent's lineage check to be done and for n
// movements synced, and returns the status.
func (r *productionLineageRig) checked(n uint64) *status.Status {
	r.t.Helper()
	return r.waitStatus("the lineage check done and every movement synced", func(s *status.Status) bool {
		l := s.DataFile.Lineage
		return l != nil && l.Check != nil && l.Check.State == status.LineageDone && s.Counts.Synced.Total == n && s.Counts.Pending.Total == 0
	})
}

// wantSkipped fails unless the status's check skipped exactly the last
// message, at stream sequence seq, for reason, and says so as a problem.
func wantSkipped(t *testing.T, st *status.Status, from, reason string, seq uint64) {
	t.Helper()
	c := st.DataFile.Lineage.Check
	want := status.SkippedRecord{Where: lineage.WhereLast, Reason: reason, Stream: central.StreamName, StreamSeq: seq}
	if c.From != from || c.Skipped != 1 || len(c.SkippedRecords) != 1 || c.SkippedRecords[0] != want {
		t.Fatalf("lineage check %+v, want from %s and skipped %+v", c, from, want)
	}
	found := false
	for _, p := range st.Judge(status.PlainThresholds(0)) {
		found = found || p.Code == status.CodeLineageSkipped
	}
	if !found {
		t.Errorf("status problems lack %s: %+v", status.CodeLineageSkipped, st.Judge(status.PlainThresholds(0)))
	}
}

// TestLineageSkipsRecordsTheStoreDidNotWrite: head office's users of the
// streams' account put JetStream answers on a store's movement subjects
// (a reply subject is not checked against their permissions), so that the
// last message there is not the store's. The agent passes over each,
// says so once (log, journal, status), decides from what it can trust,
// and delivers every movement it accepted, reusing no sequence:
//   - before its first start, admin's stream-info answer (no Rx-Seq): the
//     agent has nothing to trust and starts as a new file;
//   - before a restart, ops's copy of the store's own fleet summary: it
//     decides from its summary;
//   - before a replaced PC's first start, ops's empty answer: the new
//     file continues after the summary, as a replaced PC does.
func TestLineageSkipsRecordsTheStoreDidNotWrite(t *testing.T) {
	r := newProductionLineageRig(t)
	seq := r.forge(r.admin, "$JS.API.STREAM.INFO."+central.StreamName, "forged-info", nil)
	c := r.start()
	r.submit(c, 300)
	st := r.checked(300)
	wantSkipped(t, st, lineage.FromNone, lineage.SkipNoSeq, seq)
	if l := st.DataFile.Lineage; l.Origin != queue.OriginNew || st.HighestSeq != 300 {
		t.Fatalf("first file: lineage %+v, highest %d", l, st.HighestSeq)
	}
	oldFile := st.DataFile.Lineage.FileID
	r.waitSummary(300)
	r.stop(c)
	if n := strings.Count(c.logText(), "LINEAGE_RECORD_SKIPPED"); n != 1 || strings.Contains(c.logText(), "LINEAGE_CHECK_FAILED") {
		t.Errorf("the skipped record was logged %d times (want once), or the check failed:\n%s", n, c.logText())
	}

	// A restart after ops copied the store's own summary onto its subject.
	seq = r.forge(r.ops, central.FleetDirectGetSubject(runStore), "forged-summary", nil)
	c = r.start()
	r.submit(c, 100)
	st = r.checked(400)
	wantSkipped(t, st, lineage.FromSummary, lineage.SkipReflected, seq)
	if l := st.DataFile.Lineage; l.FileID != oldFile || l.Origin != queue.OriginNew || st.HighestSeq != 400 {
		t.Fatalf("after the restart: lineage %+v, highest %d", l, st.HighestSeq)
	}
	r.waitSummary(400)
	r.stop(c)

	// The PC is replaced, after ops put an empty answer there.
	seq = r.forge(r.ops, "$JS.API.DIRECT.GET."+central.FleetStreamName, "forged-empty", nil)
	if err := os.RemoveAll(r.dataDir); err != nil {
		t.Fatal(err)
	}
	c = r.start()
	r.submit(c, 50)
	st = r.checked(50)
	wantSkipped(t, st, lineage.FromSummary, lineage.SkipNoSeq, seq)
	l := st.DataFile.Lineage
	if l.Origin != queue.OriginReplaced || l.Prev != oldFile || l.Base != 400 || st.HighestSeq != 450 {
		t.Fatalf("replaced file: lineage %+v, highest %d; want replaced after %s at 400, highest 450", l, st.HighestSeq, oldFile)
	}
	plain, _ := exec.Command(r.bin, "status", "--data-dir", r.dataDir).Output()
	if !strings.Contains(string(plain), "1 record(s) skipped: last movement: no seq, RX_MOVEMENTS #") {
		t.Errorf("agent status does not show the skipped record:\n%s", plain)
	}
	r.stop(c)

	h, files := r.centralHeld(450)
	h.noReuse(t)
	if lo, hi, n := seqRange(h, oldFile); lo != 1 || hi != 400 || n != 400 {
		t.Errorf("old file in central: %d..%d (%d), want 1..400", lo, hi, n)
	}
	if lo, hi, n := seqRange(h, l.FileID); lo != 401 || hi != 450 || n != 50 {
		t.Errorf("new file in central: %d..%d (%d), want 401..450", lo, hi, n)
	}
	if len(files) != 2 {
		t.Errorf("files in central: %v", files)
	}
}
