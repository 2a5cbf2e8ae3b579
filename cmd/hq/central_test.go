package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/headoffice/reconcile"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// chain is a simulated chain on a real server: the movement stream, the
// archive sourced from it (deletes allowed, so a test can lose a
// message behind central's back), and the fleet bucket.
type chain struct {
	t   *testing.T
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
	ctx context.Context
	// published counts the movements stored in the movement stream, and
	// deleted those deleted from the archive, so the archive can be
	// awaited.
	published, deleted uint64
}

func startChain(t *testing.T) *chain {
	t.Helper()
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	c := &chain{t: t, url: srv.URL(), nc: natstest.Connect(t, srv.URL())}
	c.js = natstest.JetStream(t, c.nc)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	c.ctx = ctx
	// A short duplicate window and purges allowed: the test can pass the
	// dedupe horizon of one subject at once, as 35 days would. The
	// archive's window is much shorter than the movement stream's, as in
	// production (10 minutes against 35 days), so a resend the movement
	// stream takes is never dropped by the archive as a duplicate.
	mv := central.StreamConfig(central.StreamOptions{DuplicateWindow: 2 * time.Second})
	mv.DenyPurge = false
	ar := central.ArchiveConfig(central.StreamOptions{DuplicateWindow: 100 * time.Millisecond})
	ar.DenyDelete = false
	for _, cfg := range []jetstream.StreamConfig{mv, ar, central.FleetStreamConfig(1)} {
		if _, err := c.js.CreateStream(ctx, cfg); err != nil {
			t.Fatalf("create %s: %v", cfg.Name, err)
		}
	}
	return c
}

// publish stores a movement in the movement stream as an agent does.
func (c *chain) publish(m central.Message) {
	c.t.Helper()
	if _, err := c.js.PublishMsgAsync(m.Msg()); err != nil {
		c.t.Fatal(err)
	}
	c.published++
}

// flush waits for every publish to be acknowledged.
func (c *chain) flush() {
	c.t.Helper()
	select {
	case <-c.js.PublishAsyncComplete():
	case <-c.ctx.Done():
		c.t.Fatal("the movement stream did not acknowledge every publish in time")
	}
}

// simulated archives movements 1..n of store, leaving out skip, and
// writes its fleet summary with highest n.
func (c *chain) simulated(store string, n uint64, skip ...uint64) []central.Message {
	c.t.Helper()
	var out []central.Message
	for seq := uint64(1); seq <= n; seq++ {
		k := sha256.Sum256(fmt.Appendf(nil, "%s\x00M%d", store, seq))
		m := central.Message{
			Store: store, Key: hex.EncodeToString(k[:16]), Seq: seq,
			Digest: fmt.Sprintf("%064x", seq), EnqueuedAt: time.Now(), Payload: []byte(`{"rx_ref":"PATIENT-SECRET"}`),
		}
		out = append(out, m)
		if !slices.Contains(skip, seq) {
			c.publish(m)
		}
	}
	c.summary(store, &status.Status{StoreID: store, HighestSeq: n})
	return out
}

func (c *chain) summary(store string, st *status.Status) {
	c.t.Helper()
	if err := remote.PublishSummary(c.ctx, c.nc, store, st); err != nil {
		c.t.Fatal(err)
	}
}

// realStore is a store with a real data file and the real responder.
type realStore struct {
	id  string
	q   *queue.Queue
	ctl *control.Server
	rec []queue.Result
}

// agentStore opens a data file for store with n movements, all leased,
// and subscribes the real responder, trusting operatorKey.
func (c *chain) agentStore(store string, n int, operatorKey string) *realStore {
	t := c.t
	t.Helper()
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	var items []movement.Prepared
	for i := range n {
		p, es := movement.Prepare(fmt.Appendf(nil, `{"movement_id":"M%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z","rx_ref":"PATIENT-SECRET"}`, i), store, time.Now())
		if es != nil {
			t.Fatal(es)
		}
		items = append(items, p)
	}
	res, err := q.Enqueue(items)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Lease(time.Now(), n); err != nil {
		t.Fatal(err)
	}
	s := &realStore{id: store, q: q, ctl: control.New(control.Options{Queue: q, StoreID: store}), rec: res}
	nc := natstest.Connect(t, c.url, nats.CustomInboxPrefix(central.InboxPrefix(store)))
	r := remote.New(remote.Options{Queue: q, DLQ: dlq.New(q), StoreID: store, OperatorKeys: []string{operatorKey}, Status: s.ctl.Status})
	t.Cleanup(r.Close)
	if err := r.Subscribe(nc); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

// deliver publishes the movements of seqs as the store's agent does and
// marks them synced.
func (c *chain) deliver(s *realStore, seqs ...uint64) {
	c.t.Helper()
	var acks []queue.Ack
	for _, seq := range seqs {
		e, err := s.q.Get(s.rec[seq-1].Key)
		if err != nil || e.Record == nil {
			c.t.Fatalf("%s seq %d: %v", s.id, seq, err)
		}
		r := e.Record
		c.publish(central.Message{Store: s.id, Key: r.KeyString(), Digest: hex.EncodeToString(r.Digest[:]), Seq: r.Seq, EnqueuedAt: r.EnqueuedAt, Payload: r.Payload})
		acks = append(acks, queue.Ack{Seq: seq, StreamSeq: seq})
	}
	if err := s.q.Settle(queue.Settlement{Acks: acks}); err != nil {
		c.t.Fatal(err)
	}
}

// finish writes the store's fleet summary from its real status document.
func (c *chain) finish(s *realStore) {
	c.t.Helper()
	st, err := s.ctl.Status()
	if err != nil {
		c.t.Fatal(err)
	}
	c.summary(s.id, st)
}

// archived waits until the archive holds what was published.
func (c *chain) archived() {
	c.t.Helper()
	c.flush()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := c.js.Stream(c.ctx, central.ArchiveStreamName)
		if err != nil {
			c.t.Fatal(err)
		}
		if got := st.CachedInfo().State.Msgs; got >= c.published-c.deleted {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the archive holds %d messages, want %d: not within a minute", st.CachedInfo().State.Msgs, c.published-c.deleted)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// archiveSeqOf is the archive's stream sequence of store's movement seq.
func (c *chain) archiveSeqOf(store string, seq uint64) uint64 {
	c.t.Helper()
	st, err := c.js.Stream(c.ctx, central.ArchiveStreamName)
	if err != nil {
		c.t.Fatal(err)
	}
	for n := uint64(1); n <= st.CachedInfo().State.LastSeq; n++ {
		m, err := st.GetMsg(c.ctx, n)
		if err != nil {
			continue
		}
		if m.Subject == central.ArchiveSubject(store) && m.Header.Get(central.HeaderSeq) == fmt.Sprint(seq) {
			return n
		}
	}
	c.t.Fatalf("%s seq %d is not in the archive", store, seq)
	return 0
}

// answerWith subscribes a fake agent for store answering every reconcile
// command with answer.
func (c *chain) answerWith(store string, answer []byte) {
	c.t.Helper()
	nc := natstest.Connect(c.t, c.url)
	if int64(len(answer)) > nc.MaxPayload() {
		c.t.Fatalf("the answer of %d bytes is over the server's max_payload", len(answer))
	}
	if _, err := nc.Subscribe(command.Subject(store, command.CmdReconcile), func(m *nats.Msg) {
		if err := m.Respond(answer); err != nil {
			c.t.Errorf("%s: answer: %v", store, err)
		}
	}); err != nil {
		c.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		c.t.Fatal(err)
	}
}

// TestCentralReconcileChain reconciles a chain of 200 stores on a real
// server: real data files and responders for the stores with gaps, the
// archive sourced from the movement stream. Exactly these are reported:
// a purged movement and a quarantined one (explained, with their
// reasons), a pending one (explained), a movement deleted from the
// archive behind central's back (unexplained: the store says it synced
// it), a repeat (a movement resent after the dedupe horizon), and three
// stores that do not answer or answer badly (junk, a huge answer, no
// agent): unexplained. The exit status is 3; reconciling only the stores
// whose gaps are explained exits 0. No payload reaches the output.
func TestCentralReconcileChain(t *testing.T) {
	c := startChain(t)
	seed, pub := ledgertest.OperatorFile(t)

	purged := c.agentStore("S0010", 5, pub)
	c.deliver(purged, 1, 2, 4, 5)
	quarantine := func(s *realStore, seq uint64) {
		t.Helper()
		s.q.Release(1, 2, 3, 4, 5)
		if _, err := s.q.Lease(time.Now(), 5); err != nil {
			t.Fatal(err)
		}
		if err := s.q.Settle(queue.Settlement{Quarantines: []queue.QuarantineAt{{Seq: seq, Reason: "permanent:too_large", Failure: queue.Failure{Kind: "permanent:too_large"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	quarantine(purged, 3)
	if _, err := purged.q.Purge(queue.Purge{Keys: [][16]byte{purged.rec[2].Key}, Actor: "local:pharmacist", Reason: "exported for the auditor"}); err != nil {
		t.Fatal(err)
	}
	quarantined := c.agentStore("S0020", 5, pub)
	c.deliver(quarantined, 1, 2, 4, 5)
	quarantine(quarantined, 3)
	deleted := c.agentStore("S0030", 5, pub)
	c.deliver(deleted, 1, 2, 3, 4, 5)
	pending := c.agentStore("S0050", 5, pub)
	c.deliver(pending, 1, 2, 3, 4)
	pending.q.Release(5)
	for _, s := range []*realStore{purged, quarantined, deleted, pending} {
		c.finish(s)
	}
	var repeat central.Message
	for i := range 200 {
		store := fmt.Sprintf("S%04d", i)
		switch store {
		case "S0010", "S0020", "S0030", "S0050":
		case "S0060", "S0070", "S0080":
			c.simulated(store, 10, 3)
		case "S0040":
			repeat = c.simulated(store, 10)[1]
		default:
			c.simulated(store, 10)
		}
	}
	c.archived()
	// S0030 loses its movement 3 from the archive behind central's back.
	ar, err := c.js.Stream(c.ctx, central.ArchiveStreamName)
	if err != nil {
		t.Fatal(err)
	}
	if err := ar.DeleteMsg(c.ctx, c.archiveSeqOf("S0030", 3)); err != nil {
		t.Fatal(err)
	}
	c.deleted++
	// S0040's movement 2 is resent after the dedupe horizon: the movement
	// stream no longer holds it (purged here, aged out in production) and
	// its duplicate window has passed.
	mvs, err := c.js.Stream(c.ctx, central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if err := mvs.Purge(c.ctx, jetstream.WithPurgeSubject(central.Subject(repeat.Store, repeat.Key))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ack, err := c.js.PublishMsg(c.ctx, repeat.Msg())
		if err != nil {
			t.Fatal(err)
		}
		if !ack.Duplicate {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the resend stays a duplicate: the duplicate window did not pass within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.published++
	c.archived()
	// S0060 answers junk, S0070 a huge answer, S0080 nothing.
	c.answerWith("S0060", []byte(`{"ok":true,"store":"S0060","result":{"highest":10,"runs":[{"from":1,"to":100,"state":"pending"}]}}`))
	var huge strings.Builder
	huge.WriteString(`{"ok":true,"store":"S0070","result":{"highest":10,"runs":[`)
	for i := range 20_000 {
		if i > 0 {
			huge.WriteString(",")
		}
		fmt.Fprintf(&huge, `{"from":%d,"to":%d,"state":"synced"}`, i+1, i+1)
	}
	huge.WriteString(`]}}`)
	c.answerWith("S0070", []byte(huge.String()))

	// A grace of 1ms: S0030 synced its movement 3 seconds ago, which
	// would otherwise be in transit to the archive (checked below).
	out, stderr, code := runCLI(t, "reconcile", "--server", c.url, "--nkey", seed, "--grace", "1ms", "--json")
	if code != cli.ExitAttention {
		t.Fatalf("reconcile: exit %d, want %d\n%s%s", code, cli.ExitAttention, out, stderr)
	}
	var rep reconcile.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	type said struct {
		missing, repeats uint64
		gaps             []reconcile.Gap
	}
	gap := func(why, reason string, explained bool) []reconcile.Gap {
		return []reconcile.Gap{{From: 3, To: 3, Why: why, Reason: reason, Explained: explained}}
	}
	want := map[string]said{
		"S0010": {1, 0, gap(reconcile.ExplainedPurged, "by local:pharmacist: exported for the auditor", true)},
		"S0020": {1, 0, gap(reconcile.ExplainedQuarantined, "permanent:too_large", true)},
		"S0030": {1, 0, gap(reconcile.UnexplainedSynced, "", false)},
		"S0040": {0, 1, nil},
		"S0050": {1, 0, []reconcile.Gap{{From: 5, To: 5, Why: reconcile.ExplainedPending, Explained: true}}},
		"S0060": {1, 0, gap(reconcile.UnexplainedBadAnswer, "the answer names sequences not asked, or out of order", false)},
		"S0070": {1, 0, gap(reconcile.UnexplainedBadAnswer, "the answer does not cover the sequences asked", false)},
		"S0080": {1, 0, gap(reconcile.UnexplainedNoAnswer, "", false)},
	}
	if len(rep.Stores) != 200 {
		t.Errorf("%d stores reported, want 200", len(rep.Stores))
	}
	for _, s := range rep.Stores {
		w, special := want[s.Store]
		if !special {
			if s.Noteworthy() || s.Held != 10 || s.Highest != 10 || s.Checked == nil || *s.Checked != (reconcile.Range{From: 1, To: 10}) {
				t.Errorf("%s: %+v, want 10 held of 10, nothing to say", s.Store, s)
			}
			continue
		}
		if s.Missing != w.missing || s.Repeats != w.repeats || !reflect.DeepEqual(s.Gaps, w.gaps) || s.Conflicts != 0 || s.SeqReused != 0 || s.Malformed != 0 || len(s.Notes) != 0 {
			t.Errorf("%s: missing %d, repeats %d, gaps %+v (conflicts %d, reused %d, malformed %d, notes %q); want %d, %d, %+v",
				s.Store, s.Missing, s.Repeats, s.Gaps, s.Conflicts, s.SeqReused, s.Malformed, s.Notes, w.missing, w.repeats, w.gaps)
		}
	}
	if rep.Total.Missing != 7 || rep.Total.ExplainedCount() != 3 || rep.Total.UnexplainedCount() != 4 || rep.Total.Repeats != 1 || rep.Records != c.published-1 {
		t.Errorf("total: %+v, %d records; want 7 missing, 3 explained, 4 unexplained, 1 repeat, %d records", rep.Total, rep.Records, c.published-1)
	}
	t.Logf("read %d archive records in %.3fs (%.0f records/s)", rep.Records, rep.ReadSeconds, rep.RecordsPerSecond)

	// The table: only the stores with something to say, and the total.
	out, _, code = runCLI(t, "reconcile", "--server", c.url, "--nkey", seed, "--grace", "1ms")
	lines := strings.Split(out, "\n")
	if code != cli.ExitAttention || len(lines) < 10 || !strings.HasPrefix(strings.TrimSpace(lines[9]), "TOTAL") || !strings.Contains(out, "S0030: 1 missing unexplained (1 synced_not_archived)") {
		t.Errorf("table: exit %d\n%s", code, out)
	}
	for _, o := range []string{out, stderr} {
		if strings.Contains(o, "PATIENT-SECRET") {
			t.Errorf("a payload reached the output:\n%s", o)
		}
	}
	// Only the explained stores: nothing needs anyone.
	out, stderr, code = runCLI(t, "reconcile", "--server", c.url, "--nkey", seed, "--store", "S0010", "--store", "S0020", "--store", "S0040", "--store", "S0050", "--csv")
	if code != cli.ExitOK || strings.Count(out, "\n") != 6 || !strings.Contains(out, "S0010,true,5,1,5,4,4,1,0,0,1,") {
		t.Errorf("explained stores: exit %d, want 0\n%s%s", code, out, stderr)
	}
	// With the default grace, S0030's movement, synced moments ago, is
	// in transit (and --operator-key is --nkey).
	out, stderr, code = runCLI(t, "reconcile", "--server", c.url, "--operator-key", seed, "--store", "S0030")
	if code != cli.ExitOK || !strings.Contains(out, "Explained: 1 in_transit") {
		t.Errorf("S0030 with the default grace: exit %d, want 0\n%s%s", code, out, stderr)
	}
	// Without asking, the gaps are unexplained.
	out, _, code = runCLI(t, "reconcile", "--server", c.url, "--no-ask", "--store", "S0050")
	if code != cli.ExitAttention || !strings.Contains(out, "1 not_asked") {
		t.Errorf("--no-ask: exit %d\n%s", code, out)
	}
}
