//go:build unix

// The data file's lineage with the built agent and a real nats-server: a
// replaced PC, a restored backup, a leftover compaction file.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/reconcile"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/natstest"
)

// lineageRig is one central and the built agent of store runStore.
type lineageRig struct {
	t       *testing.T
	bin     string
	url     string
	nc      *nats.Conn
	js      jetstream.JetStream
	dataDir string
	next    int // movement ids made so far
}

func newLineageRig(t *testing.T) *lineageRig {
	t.Helper()
	// Heartbeats (and with them the fleet summary) often, so the test
	// waits for the summary instead of half a minute.
	t.Setenv("RXEDGE_SYNC_HEARTBEAT_INTERVAL", "200ms")
	srv := natstest.StartHub(t)
	r := &lineageRig{t: t, bin: buildAgent(t), url: srv.URL(), dataDir: filepath.Join(t.TempDir(), "data")}
	r.nc = natstest.Connect(t, r.url)
	r.js = natstest.JetStream(t, r.nc)
	return r
}

func (r *lineageRig) start() *child {
	return startChild(r.t, r.bin, "--store-id", runStore, "--data-dir", r.dataDir, "--ingest", "127.0.0.1:0", "--nats", r.url)
}

// stop ends an agent with SIGTERM (a clean stop) and waits for it.
func (r *lineageRig) stop(c *child) {
	r.t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	c.wait(r.t, 20*time.Second)
}

// submit posts n new movements in requests of 100 and checks each was
// acknowledged.
func (r *lineageRig) submit(c *child, n int) {
	r.t.Helper()
	for n > 0 {
		batch := min(n, 100)
		var b strings.Builder
		for range batch {
			r.next++
			fmt.Fprintf(&b, `{"movement_id":"LIN-%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`+"\n", r.next)
		}
		resp, err := http.Post("http://"+c.ingest+"/v1/movements", "application/x-ndjson", strings.NewReader(b.String()))
		if err != nil {
			r.t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			r.t.Fatalf("submit: HTTP %d %s", resp.StatusCode, body)
		}
		n -= batch
	}
}

// waitStatus polls the agent's status until ok says so (deadline 60 s):
// what is awaited is named by what.
func (r *lineageRig) waitStatus(what string, ok func(*status.Status) bool) *status.Status {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := agentStatus(r.t, r.bin, r.dataDir)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("waited 60 s for %s; status: %+v, lineage %+v", what, st.Counts, st.DataFile.Lineage)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitSummary waits until the store's fleet summary says highest.
func (r *lineageRig) waitSummary(highest uint64) command.Summary {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var s command.Summary
		m, err := r.nc.Request(central.FleetDirectGetSubject(runStore), nil, 2*time.Second)
		if err == nil && m.Header.Get("Status") == "" && json.Unmarshal(m.Data, &s) == nil && s.HighestSeq == highest {
			return s
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the fleet summary did not reach highest sequence %d within 60 s (last %+v, %v)", highest, s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// held is what central's movement stream holds for the store: per
// sequence the keys and files stored under it.
type held map[uint64][]string

// centralHeld reads every movement of the store in central, after waiting
// for the archive to hold want records.
func (r *lineageRig) centralHeld(want int) (held, map[string]int) {
	r.t.Helper()
	ctx := r.t.Context()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ar, err := r.js.Stream(ctx, central.ArchiveStreamName)
		if err != nil {
			r.t.Fatal(err)
		}
		if int(ar.CachedInfo().State.Msgs) >= want {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the archive holds %d records, want %d", ar.CachedInfo().State.Msgs, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cons, err := r.js.OrderedConsumer(ctx, central.ArchiveStreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{central.ArchiveSubject(runStore)}})
	if err != nil {
		r.t.Fatal(err)
	}
	h, files := held{}, map[string]int{}
	for n := 0; n < want; {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			r.t.Fatalf("read the archive: %v", err)
		}
		if ledger.IsCheckpointToken(m.Headers().Get(central.HeaderMsgID)) || m.Headers().Get(central.HeaderSeq) == "" {
			continue // the store's checkpoint, or a record the store did not write: not a movement
		}
		n++
		seq, _ := strconv.ParseUint(m.Headers().Get(central.HeaderSeq), 10, 64)
		file := m.Headers().Get(central.HeaderFile)
		h[seq] = append(h[seq], central.KeyOfMsgID(m.Headers().Get(central.HeaderMsgID))+"@"+file)
		files[file]++
	}
	return h, files
}

// noReuse fails when central holds two movements under one sequence.
func (h held) noReuse(t *testing.T) {
	t.Helper()
	for seq, keys := range h {
		if len(keys) > 1 {
			t.Errorf("sequence %d stored %d times: %v", seq, len(keys), keys)
		}
	}
}

// reconcileStore runs head office's reconciliation with its built binary
// (hq).
func (r *lineageRig) reconcileStore() (reconcile.StoreReport, string, int) {
	r.t.Helper()
	out, err := exec.Command(agentbin.BuildHQ(r.t), "reconcile", "--server", r.url, "--no-ask", "--grace", "1ms", "--store", runStore, "--json").Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatal(err)
	}
	var rep reconcile.Report
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Stores) != 1 {
		r.t.Fatalf("reconcile --json: %v\n%s", err, out)
	}
	text, _ := exec.Command(agentbin.BuildHQ(r.t), "reconcile", "--server", r.url, "--no-ask", "--grace", "1ms", "--store", runStore).CombinedOutput()
	return rep.Stores[0], string(text), code
}

func seqRange(h held, file string) (lo, hi uint64, n int) {
	for seq, keys := range h {
		for _, k := range keys {
			if strings.HasSuffix(k, "@"+file) {
				if lo == 0 || seq < lo {
					lo = seq
				}
				hi = max(hi, seq)
				n++
			}
		}
	}
	return lo, hi, n
}

// TestLineageReplacedPC: a store's agent synced 1,000 movements and holds
// 50 more pending (central's stream full: the agent is connected, so its
// fleet summary says it gave 1,050) when its PC dies and is replaced: the
// new PC's agent starts on an empty data directory. It continues after
// sequence 1,050, so central never holds two movements under one
// sequence, and the reconciliation names 1,001..1,050 as lost with the
// old file's identity and exits non-zero.
func TestLineageReplacedPC(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent with 1,070 movements")
	}
	r := newLineageRig(t)
	c := r.start()
	r.submit(c, 1000)
	st := r.waitStatus("1,000 synced", func(s *status.Status) bool { return s.Counts.Synced.Total == 1000 })
	oldFile := st.DataFile.Lineage.FileID
	if oldFile == "" || !st.DataFile.Lineage.Confirmed {
		t.Fatalf("lineage of the first file: %+v", st.DataFile.Lineage)
	}
	// Central takes nothing more: the next 50 stay pending.
	mvs, err := r.js.Stream(t.Context(), central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mvs.CachedInfo().Config
	full := cfg
	full.MaxMsgs, full.Discard = 1000, jetstream.DiscardNew
	if _, err := r.js.UpdateStream(t.Context(), full); err != nil {
		t.Fatal(err)
	}
	r.submit(c, 50)
	r.waitStatus("50 pending, paused", func(s *status.Status) bool {
		return s.Counts.Pending.Total == 50 && s.Connection.State == status.Paused
	})
	if s := r.waitSummary(1050); s.FileID != oldFile {
		t.Fatalf("fleet summary names file %s, want %s", s.FileID, oldFile)
	}
	c.cmd.Process.Kill() // the PC dies
	<-c.exited
	if _, err := r.js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}

	// The replacement PC: an empty data directory.
	if err := os.RemoveAll(r.dataDir); err != nil {
		t.Fatal(err)
	}
	c = r.start()
	r.submit(c, 20)
	st = r.waitStatus("20 synced by the new file", func(s *status.Status) bool { return s.Counts.Synced.Total == 20 })
	l := st.DataFile.Lineage
	if l.FileID == oldFile || l.Origin != queue.OriginReplaced || l.Prev != oldFile || l.Base != 1050 || !l.Confirmed || st.HighestSeq != 1070 {
		t.Fatalf("new file's lineage %+v, highest %d; want replaced after %s at 1050, highest 1070", l, st.HighestSeq, oldFile)
	}
	r.stop(c)

	h, files := r.centralHeld(1020)
	h.noReuse(t)
	if lo, hi, n := seqRange(h, oldFile); lo != 1 || hi != 1000 || n != 1000 {
		t.Errorf("old file in central: %d..%d (%d), want 1..1000", lo, hi, n)
	}
	if lo, hi, n := seqRange(h, l.FileID); lo != 1051 || hi != 1070 || n != 20 {
		t.Errorf("new file in central: %d..%d (%d), want 1051..1070", lo, hi, n)
	}
	if len(files) != 2 {
		t.Errorf("files in central: %v", files)
	}

	sr, text, code := r.reconcileStore()
	if code == 0 {
		t.Errorf("reconcile exited 0 with 50 movements lost:\n%s", text)
	}
	if sr.LostWithFile != 50 || sr.UnexplainedCount() != 0 || sr.SeqReused != 0 || len(sr.Files) != 1 {
		t.Fatalf("reconcile: lost with file %d, unexplained %d, reused %d, files %+v", sr.LostWithFile, sr.UnexplainedCount(), sr.SeqReused, sr.Files)
	}
	f := sr.Files[0]
	if f.Prev != oldFile || f.File != l.FileID || f.Origin != reconcile.FileReplaced || f.Lost == nil || *f.Lost != (reconcile.Range{From: 1001, To: 1050}) {
		t.Errorf("finding %+v, want 1001..1050 of %s lost", f, oldFile)
	}
	want := fmt.Sprintf("file %s replaced by file %s", oldFile, l.FileID)
	if !strings.Contains(text, want) || !strings.Contains(text, "sequences 1001..1050 of "+oldFile+" never reached central (50 lost)") {
		t.Errorf("reconcile text does not name the replacement and the loss:\n%s", text)
	}
}

// TestLineageRestoredBackup: the data file is restored from a copy taken
// 500 movements earlier. The agent reports it (status problem, journal,
// metric), continues after central's highest sequence under a new
// identity, reuses no sequence, and the reconciliation is clean apart
// from the reported restore.
func TestLineageRestoredBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent with 1,100 movements")
	}
	r := newLineageRig(t)
	c := r.start()
	r.submit(c, 500)
	r.waitStatus("500 synced", func(s *status.Status) bool { return s.Counts.Synced.Total == 500 })
	r.stop(c)
	backup := filepath.Join(t.TempDir(), "agent.db.bak")
	copyFile(t, settings.DataFile(r.dataDir), backup)

	c = r.start()
	r.submit(c, 500)
	st := r.waitStatus("1,000 synced", func(s *status.Status) bool { return s.Counts.Synced.Total == 1000 })
	oldFile := st.DataFile.Lineage.FileID
	r.waitSummary(1000)
	r.stop(c)

	copyFile(t, backup, settings.DataFile(r.dataDir))
	c = r.start()
	r.submit(c, 100)
	st = r.waitStatus("the restored file's 100 new movements synced", func(s *status.Status) bool {
		return s.Counts.Synced.Total == 600 && s.Counts.Pending.Total == 0
	})
	l := st.DataFile.Lineage
	if l.Origin != queue.OriginRestored || l.Prev != oldFile || l.FileID == oldFile || l.Base != 1000 || l.RestoredAt == nil || st.HighestSeq != 1100 {
		t.Fatalf("restored file's lineage %+v, highest %d", l, st.HighestSeq)
	}
	judged := st.Judge(status.PlainThresholds(0))
	found := false
	for _, p := range judged {
		found = found || p.Code == status.CodeFileRestored
	}
	if !found {
		t.Errorf("status problems %+v lack %s", judged, status.CodeFileRestored)
	}
	r.stop(c)

	q, err := queue.Open(queue.Options{Path: settings.DataFile(r.dataDir), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var restored []queue.Event
	q.Events(time.Time{}, func(e queue.Event) bool {
		if e.Action == queue.ActionLineage && e.Detail["origin"] == queue.OriginRestored {
			restored = append(restored, e)
		}
		return true
	})
	q.Close()
	if len(restored) != 1 || restored[0].Detail["prev"] != oldFile || restored[0].Detail["central_highest"] != "1000" {
		t.Errorf("journal lineage entries %+v, want one restore after %s at 1000", restored, oldFile)
	}

	h, _ := r.centralHeld(1100)
	h.noReuse(t)
	if lo, hi, n := seqRange(h, l.FileID); lo != 1001 || hi != 1100 || n != 100 {
		t.Errorf("restored file in central: %d..%d (%d), want 1001..1100", lo, hi, n)
	}
	sr, text, code := r.reconcileStore()
	if code != 0 || !sr.OK() || sr.Missing != 0 || len(sr.Files) != 1 || sr.Files[0].Origin != reconcile.FileRestored || sr.Files[0].Lost != nil {
		t.Fatalf("reconcile: exit %d, %+v\n%s", code, sr, text)
	}
	if !strings.Contains(text, fmt.Sprintf("file %s restored from an older copy as file %s", oldFile, l.FileID)) {
		t.Errorf("reconcile text does not report the restore:\n%s", text)
	}
}

// TestLineageLeftoverCompactAdopted: the data file is missing and a
// complete agent.db.compact is beside it (a rename that did not land).
// The agent refuses to start with a message naming the commands;
// `agent compact` deletes nothing; `agent data adopt` takes the leftover
// back, journalled; the agent then delivers every movement, none lost.
func TestLineageLeftoverCompactAdopted(t *testing.T) {
	r := newLineageRig(t)
	c := startChild(t, r.bin, "--store-id", runStore, "--data-dir", r.dataDir, "--ingest", "127.0.0.1:0")
	r.submit(c, 300)
	r.stop(c)
	path := settings.DataFile(r.dataDir)
	if err := os.Rename(path, path+queue.CompactSuffix); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.bin, "run", "--store-id", runStore, "--data-dir", r.dataDir, "--ingest", "127.0.0.1:0", "--nats", r.url).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("the agent started over a leftover (%v):\n%s", err, out)
	}
	for _, w := range []string{"agent.db.compact", "last sequence 300", "agent data adopt", "agent data discard"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("refusal lacks %q:\n%s", w, out)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a new data file was made over the leftover: %v", err)
	}
	if out, err := exec.Command(r.bin, "compact", "--data-dir", r.dataDir, "--force").CombinedOutput(); err == nil {
		t.Errorf("compact succeeded beside a missing data file:\n%s", out)
	}
	if _, err := os.Stat(path + queue.CompactSuffix); err != nil {
		t.Fatalf("the leftover is gone: %v", err)
	}
	if out, err := exec.Command(r.bin, "data", "adopt", "--data-dir", r.dataDir, "--store-id", runStore).CombinedOutput(); err == nil {
		t.Errorf("adopt without --reason succeeded:\n%s", out)
	}
	out, err = exec.Command(r.bin, "data", "adopt", "--data-dir", r.dataDir, "--store-id", runStore, "--reason", "the rename of a compaction did not land").CombinedOutput()
	if err != nil {
		t.Fatalf("adopt: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "adopted agent.db.compact") || !strings.Contains(string(out), "last sequence 300") {
		t.Errorf("adopt says:\n%s", out)
	}

	c = r.start()
	st := r.waitStatus("300 synced", func(s *status.Status) bool { return s.Counts.Synced.Total == 300 })
	if st.HighestSeq != 300 || st.Counts.Pending.Total != 0 {
		t.Fatalf("after adoption: highest %d, pending %d", st.HighestSeq, st.Counts.Pending.Total)
	}
	r.stop(c)
	h, _ := r.centralHeld(300)
	h.noReuse(t)
	if lo, hi, n := seqRange(h, st.DataFile.Lineage.FileID); lo != 1 || hi != 300 || n != 300 {
		t.Errorf("central holds %d..%d (%d), want 1..300", lo, hi, n)
	}
	q, err := queue.Open(queue.Options{Path: path, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var adopted []queue.Event
	q.Events(time.Time{}, func(e queue.Event) bool {
		if e.Action == queue.ActionLineage && e.Detail["decision"] == "adopt" {
			adopted = append(adopted, e)
		}
		return true
	})
	q.Close()
	if len(adopted) != 1 || adopted[0].Reason != "the rename of a compaction did not land" || !strings.HasPrefix(adopted[0].Actor, "local:") {
		t.Errorf("journal adoption entries %+v", adopted)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
