package reconcile_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"reflect"
	stdsync "sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/reconcile"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// rig is a real server with archive streams that take their subjects
// directly (the records are published into them as the archive would
// hold them) and the fleet bucket.
type rig struct {
	t   *testing.T
	nc  *nats.Conn
	js  jetstream.JetStream
	ctx context.Context
	ids map[string]bool // the Nats-Msg-Ids put
}

// newRig creates one archive stream per entry of archives, named by it
// and taking the archive subjects of its stores.
func newRig(t *testing.T, archives map[string][]string) *rig {
	t.Helper()
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	r := &rig{t: t, nc: natstest.Connect(t, srv.URL())}
	r.js = natstest.JetStream(t, r.nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	r.ctx = ctx
	for name, stores := range archives {
		cfg := central.ArchiveConfig(central.StreamOptions{DuplicateWindow: 100 * time.Millisecond})
		cfg.Name, cfg.Sources = name, nil
		for _, s := range stores {
			cfg.Subjects = append(cfg.Subjects, central.ArchiveSubject(s))
		}
		if _, err := r.js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.js.CreateStream(ctx, central.FleetStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) put(m *nats.Msg) {
	r.t.Helper()
	// The archive's own duplicate window would drop a second copy with
	// the same Nats-Msg-Id: a repeat is resent long after it. An id is
	// made unique in the full form, whose Rx-Digest leaves the id's tail
	// free; a compact record put once keeps its form.
	id := m.Header.Get(jetstream.MsgIDHeader)
	if r.ids == nil {
		r.ids = map[string]bool{}
	}
	if r.ids[id] {
		if m.Header.Get(central.HeaderDigest) == "" {
			d := central.DigestOf(m.Header)
			m.Header.Set(central.HeaderDigest, d)
			id = central.KeyOfMsgID(id) + "-" + d[:min(32, len(d))]
		}
		m.Header.Set(jetstream.MsgIDHeader, id+"-"+time.Now().Format(time.RFC3339Nano))
	}
	r.ids[id] = true
	if _, err := r.js.PublishMsg(r.ctx, m); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) fleet(store string, highest uint64) {
	r.t.Helper()
	if err := remote.PublishSummary(r.ctx, r.nc, store, &status.Status{StoreID: store, HighestSeq: highest}); err != nil {
		r.t.Fatal(err)
	}
}

// asker is a store's side of the reconcile command, in the test.
type asker struct {
	mu     stdsync.Mutex
	asked  map[string][][]command.SeqRange
	answer func(ctx context.Context, store string, a command.ReconcileArgs) (command.ReconcileResult, error)
}

func (k *asker) Reconcile(ctx context.Context, store string, a command.ReconcileArgs) (command.ReconcileResult, error) {
	k.mu.Lock()
	if k.asked == nil {
		k.asked = map[string][][]command.SeqRange{}
	}
	k.asked[store] = append(k.asked[store], a.Seqs)
	k.mu.Unlock()
	return k.answer(ctx, store, a)
}

// allPending answers every sequence asked as pending.
func allPending(_ context.Context, _ string, a command.ReconcileArgs) (command.ReconcileResult, error) {
	res := command.ReconcileResult{Highest: 1 << 40}
	for _, r := range a.Seqs {
		res.Runs = append(res.Runs, command.SeqRun{From: r[0], To: r[1], State: command.SeqPending})
	}
	return res, nil
}

func storeOf(t *testing.T, rep *reconcile.Report, id string) reconcile.StoreReport {
	t.Helper()
	for _, s := range rep.Stores {
		if s.Store == id {
			return s
		}
	}
	t.Fatalf("store %s not in the report", id)
	return reconcile.StoreReport{}
}

// TestRunAcrossPartitions reads two partitions' archives: a repeat, a
// conflict (a key archived again under a new sequence with another
// content, after the store forgot it), a sequence archived for two keys,
// a record without Rx-Seq and one naming another store, and a gap the
// store explains. Only S0002 is asked, once, for exactly its gap.
func TestRunAcrossPartitions(t *testing.T) {
	r := newRig(t, map[string][]string{"RX_ARCHIVE_0": {"S0001", "S0003"}, "RX_ARCHIVE_1": {"S0002"}})
	now := time.Now()
	for seq := uint64(1); seq <= 5; seq++ {
		r.put(archiveMsg("S0001", seq, "", "", now))
	}
	r.put(archiveMsg("S0001", 2, "", "", now))       // repeat
	r.put(archiveMsg("S0001", 6, "3", "other", now)) // the key of 3, another content: conflict
	r.put(archiveMsg("S0001", 4, "other", "", now))  // sequence 4 for another key
	noSeq := archiveMsg("S0001", 7, "", "", now)
	noSeq.Header.Del(central.HeaderSeq)
	r.put(noSeq)
	forged := archiveMsg("S0001", 7, "", "", now)
	forged.Header.Set(central.HeaderStore, "S0002")
	r.put(forged)
	for _, seq := range []uint64{1, 2, 3, 5} {
		r.put(archiveMsg("S0002", seq, "", "", now))
	}
	r.fleet("S0001", 6)
	r.fleet("S0002", 5)
	r.fleet("S0004", 0) // a new store: nothing to say

	k := &asker{answer: allPending}
	last := map[string][2]uint64{}
	progress := func(read string, done, total uint64) { last[read] = [2]uint64{done, total} }
	rep, err := reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc, Asker: k, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][2]uint64{reconcile.ReadFirst: {14, 14}, reconcile.ReadAgain: {10, 14}}; !reflect.DeepEqual(last, want) {
		t.Errorf("progress ended at %v, want %v (the second read is of S0001 only)", last, want)
	}
	if len(rep.Streams) != 2 || rep.Records != 14 {
		t.Errorf("streams %+v, %d records; want 2 streams, 14 records", rep.Streams, rep.Records)
	}
	s1 := storeOf(t, rep, "S0001")
	if s1.Held != 6 || s1.Missing != 0 || s1.Repeats != 1 || s1.Conflicts != 1 || s1.SeqReused != 1 || s1.Malformed != 2 || s1.OK() || len(s1.ConflictKeys) != 1 {
		t.Errorf("S0001: %+v; want 6 held, none missing, 1 repeat, 1 conflict, 1 reused, 2 malformed", s1)
	}
	s2 := storeOf(t, rep, "S0002")
	if want := []reconcile.Gap{{From: 4, To: 4, Why: reconcile.ExplainedPending, Explained: true}}; s2.Missing != 1 || !reflect.DeepEqual(s2.Gaps, want) || !s2.OK() {
		t.Errorf("S0002: %+v; want 4 missing and pending", s2)
	}
	if want := map[string][][]command.SeqRange{"S0002": {{{4, 4}}}}; !reflect.DeepEqual(k.asked, want) {
		t.Errorf("asked %v, want %v", k.asked, want)
	}
	if rep.OK() {
		t.Error("the report is OK despite a conflict")
	}
}

// TestRunSince reads only what was archived since T: a store is checked
// from its lowest sequence enqueued since T (plus the grace), so neither a
// gap below it nor a late delivery of an old movement is reported.
func TestRunSince(t *testing.T) {
	r := newRig(t, map[string][]string{central.ArchiveStreamName: {"S0001", "S0002"}})
	old := time.Now().Add(-48 * time.Hour)
	for _, seq := range []uint64{1, 2, 3, 5} {
		r.put(archiveMsg("S0001", seq, "", "", old))
	}
	r.put(archiveMsg("S0002", 1, "", "", old))
	// Since is just after the last message stored so far, by the
	// server's clock, which stamps what --since selects.
	st, err := r.js.Stream(r.ctx, central.ArchiveStreamName)
	if err != nil {
		t.Fatal(err)
	}
	since := st.CachedInfo().State.LastTime.Add(time.Nanosecond)
	recent := time.Now().Add(time.Second)
	r.put(archiveMsg("S0001", 4, "", "", old)) // a late delivery of an old movement
	for _, seq := range []uint64{8, 9, 11} {
		r.put(archiveMsg("S0001", seq, "", "", recent))
	}
	r.fleet("S0001", 12)
	r.fleet("S0002", 3)
	k := &asker{answer: allPending}
	rep, err := reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc, Asker: k, Since: since, Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s1 := storeOf(t, rep, "S0001")
	if s1.Checked == nil || *s1.Checked != (reconcile.Range{From: 8, To: 12}) || s1.Missing != 2 || s1.Held != 4 {
		t.Errorf("S0001: checked %v, %d missing, %d held; want 8-12, 2 (10 and 12), 4", s1.Checked, s1.Missing, s1.Held)
	}
	if want := map[string][][]command.SeqRange{"S0001": {{{10, 10}, {12, 12}}}}; !reflect.DeepEqual(k.asked, want) {
		t.Errorf("asked %v, want %v", k.asked, want)
	}
	s2 := storeOf(t, rep, "S0002")
	if s2.Checked != nil || len(s2.Notes) != 1 || !s2.OK() {
		t.Errorf("S0002: %+v; want not checked, with a note", s2)
	}
}

// TestRunAskingGoesWrong: answers too large for one message are asked
// again in halves; a refusal, a store that does not answer in time and
// one over the limit of sequences asked leave their sequences
// unexplained, saying why.
func TestRunAskingGoesWrong(t *testing.T) {
	r := newRig(t, map[string][]string{central.ArchiveStreamName: {"S0001", "S0002", "S0003", "S0004"}})
	for _, s := range []string{"S0001", "S0002", "S0003", "S0004"} {
		r.put(archiveMsg(s, 1, "", "", time.Now()))
		r.fleet(s, 9)
	}
	k := &asker{answer: func(ctx context.Context, store string, a command.ReconcileArgs) (command.ReconcileResult, error) {
		n := 0
		for _, rg := range a.Seqs {
			n += int(rg[1] - rg[0] + 1)
		}
		switch {
		case store == "S0001" && n > 2:
			return command.ReconcileResult{}, &command.Error{Store: store, Cmd: command.CmdReconcile, Code: command.CodeReplyTooLarge}
		case store == "S0002":
			return command.ReconcileResult{}, &command.Error{Store: store, Cmd: command.CmdReconcile, Code: command.CodeUnknownKey}
		case store == "S0003":
			<-ctx.Done()
			return command.ReconcileResult{}, ctx.Err()
		}
		return allPending(ctx, store, a)
	}}
	rep, err := reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc, Asker: k, Timeout: 100 * time.Millisecond, MaxAskPerStore: 5})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ explained, unexplained map[string]uint64 }{
		"S0001": {map[string]uint64{reconcile.ExplainedPending: 5}, map[string]uint64{reconcile.UnexplainedNotAsked: 3}},
		"S0002": {nil, map[string]uint64{reconcile.UnexplainedRefused: 5, reconcile.UnexplainedNotAsked: 3}},
		"S0003": {nil, map[string]uint64{reconcile.UnexplainedNoAnswer: 5, reconcile.UnexplainedNotAsked: 3}},
		"S0004": {map[string]uint64{reconcile.ExplainedPending: 5}, map[string]uint64{reconcile.UnexplainedNotAsked: 3}},
	}
	for id, w := range want {
		s := storeOf(t, rep, id)
		if s.Missing != 8 || !reflect.DeepEqual(s.Explained, w.explained) || !reflect.DeepEqual(s.Unexplained, w.unexplained) {
			t.Errorf("%s: %d missing, explained %v, unexplained %v; want 8, %v, %v", id, s.Missing, s.Explained, s.Unexplained, w.explained, w.unexplained)
		}
	}
	// S0001 was asked 2..6, then in halves until each part fitted.
	if got := len(k.asked["S0001"]); got < 3 {
		t.Errorf("S0001 asked %d times (%v), want the request halved", got, k.asked["S0001"])
	}
}

// TestRunHalvesWhatDoesNotFitAMessage: a real store's answer about 100
// missing sequences in 100 runs is over a server's 4 KiB max_payload;
// its responder says so, and the reconciliation asks again in halves
// until each answer fits, and explains every sequence.
func TestRunHalvesWhatDoesNotFitAMessage(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision(), natstest.WithMaxPayload(4096))
	r := &rig{t: t, nc: natstest.Connect(t, srv.URL())}
	r.js = natstest.JetStream(t, r.nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r.ctx = ctx
	cfg := central.ArchiveConfig(central.StreamOptions{})
	cfg.Sources, cfg.Subjects = nil, []string{central.ArchiveSubject("S0001")}
	for _, c := range []jetstream.StreamConfig{cfg, central.FleetStreamConfig(1)} {
		if _, err := r.js.CreateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: "S0001"})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var items []movement.Prepared
	for i := range 200 {
		p, es := movement.Prepare(fmt.Appendf(nil, `{"movement_id":"M%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, i), "S0001", time.Now())
		if es != nil {
			t.Fatal(es)
		}
		items = append(items, p)
	}
	if _, err := q.Enqueue(items); err != nil {
		t.Fatal(err)
	}
	leased, err := q.Lease(time.Now(), 200)
	if err != nil {
		t.Fatal(err)
	}
	// Even sequences are delivered, odd ones quarantined.
	var acks []queue.Ack
	var quarantined []queue.QuarantineAt
	for _, rec := range leased {
		if rec.Seq%2 == 1 {
			quarantined = append(quarantined, queue.QuarantineAt{Seq: rec.Seq, Reason: "permanent:too_large", Failure: queue.Failure{Kind: "permanent:too_large"}})
			continue
		}
		m := central.Message{Store: "S0001", Key: rec.KeyString(), Digest: hex.EncodeToString(rec.Digest[:]), Seq: rec.Seq, EnqueuedAt: rec.EnqueuedAt}.Msg()
		m.Subject = central.ArchiveSubject("S0001")
		m.Header.Del(central.HeaderExpectLast)
		if _, err := r.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		acks = append(acks, queue.Ack{Seq: rec.Seq})
	}
	if err := q.Settle(queue.Settlement{Acks: acks, Quarantines: quarantined}); err != nil {
		t.Fatal(err)
	}
	r.fleet("S0001", 200)
	signer := ledgertest.OperatorSigner(t)
	storeConn := natstest.Connect(t, srv.URL(), nats.CustomInboxPrefix(central.InboxPrefix("S0001")))
	resp := remote.New(remote.Options{Queue: q, DLQ: dlq.New(q), StoreID: "S0001", OperatorKeys: []string{signer.PublicKey()}})
	defer resp.Close()
	if err := resp.Subscribe(storeConn); err != nil {
		t.Fatal(err)
	}
	if err := storeConn.Flush(); err != nil {
		t.Fatal(err)
	}
	client := fleet.NewClient(r.nc, signer)
	k := &asker{answer: func(ctx context.Context, store string, a command.ReconcileArgs) (command.ReconcileResult, error) {
		return client.Reconcile(ctx, store, a)
	}}
	rep, err := reconcile.Run(ctx, reconcile.Options{Conn: r.nc, Asker: k})
	if err != nil {
		t.Fatal(err)
	}
	s := storeOf(t, rep, "S0001")
	if s.Missing != 100 || !reflect.DeepEqual(s.Explained, map[string]uint64{reconcile.ExplainedQuarantined: 100}) || len(s.Unexplained) != 0 {
		t.Errorf("S0001: %d missing, explained %v, unexplained %v; want 100 quarantined", s.Missing, s.Explained, s.Unexplained)
	}
	if n := len(k.asked["S0001"]); n < 3 {
		t.Errorf("asked %d times, want the request halved until the answers fit", n)
	}
}

// migrated archives sequences 1..n of store in RX_ARCHIVE, and the
// migration's copy of each in RX_ARCHIVE_0, which it creates beside it;
// publish to "copy.<store>" to archive more there. The partition's
// archive takes the same archive subject through a transform, so that
// the two streams' subjects do not overlap.
func (r *rig) migrated(store string, n uint64, at time.Time) {
	r.t.Helper()
	cfg := central.ArchiveConfig(central.StreamOptions{Partitions: 2, DuplicateWindow: 100 * time.Millisecond})
	cfg.Sources, cfg.Subjects = nil, []string{"copy.*"}
	cfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "copy.*", Destination: central.ArchivePrefix + "{{wildcard(1)}}"}
	if _, err := r.js.CreateStream(r.ctx, cfg); err != nil {
		r.t.Fatal(err)
	}
	for seq := uint64(1); seq <= n; seq++ {
		r.put(archiveMsg(store, seq, "", "", at))
		c := archiveMsg(store, seq, "", "", at)
		c.Subject = "copy." + store
		c.Header.Set(central.HeaderMigratedFrom, central.StreamName)
		r.put(c)
	}
}

// TestRunSkipsMigratedCopies: after the move to a partitioned central,
// the one-partition archive keeps the originals and the partitions'
// archives hold the copies the migration made (Rx-Migrated-From). Read
// together, the copies are skipped, not counted as repeats; a partition's
// archive read alone counts them as its records. Named archives are read
// without listing the streams, and a missing one is passed over.
func TestRunSkipsMigratedCopies(t *testing.T) {
	r := newRig(t, map[string][]string{central.ArchiveStreamName: {"S0001"}})
	now := time.Now()
	r.migrated("S0001", 3, now)
	after := archiveMsg("S0001", 4, "", "", now) // stored in the partition after the move
	after.Subject = "copy.S0001"
	r.put(after)
	r.fleet("S0001", 4)

	both := []string{central.ArchiveStreamName, "RX_ARCHIVE_0", "RX_ARCHIVE_1"} // _1 does not exist
	rep, err := reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc, Archives: both})
	if err != nil {
		t.Fatal(err)
	}
	s1 := storeOf(t, rep, "S0001")
	if len(rep.Streams) != 2 || rep.Streams[1].MigratedCopies != 3 || s1.Held != 4 || s1.Repeats != 0 || s1.Missing != 0 || !rep.OK() {
		t.Errorf("both archives: streams %+v, S0001 %+v; want 2 streams, 3 copies skipped, 4 held, no repeat", rep.Streams, s1)
	}
	rep, err = reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc, Archives: []string{"RX_ARCHIVE_0"}})
	if err != nil {
		t.Fatal(err)
	}
	s1 = storeOf(t, rep, "S0001")
	if len(rep.Streams) != 1 || rep.Streams[0].MigratedCopies != 0 || s1.Held != 4 || s1.Repeats != 0 || !rep.OK() {
		t.Errorf("the partition's archive alone: streams %+v, S0001 %+v; want its 4 records held", rep.Streams, s1)
	}
}

// checkpointMsg is a store's published checkpoint as the archive holds it
// (central/ledger; the store's notary sets these headers).
func checkpointMsg(store string, lastSeq uint64) *nats.Msg {
	tok := ledger.CheckpointToken("0123456789abcdef", int64(lastSeq))
	m := nats.NewMsg(central.ArchiveSubject(store))
	m.Data = []byte(`{"note":"not read here","prev_size":0}`)
	m.Header.Set(central.HeaderMsgID, ledger.CheckpointMsgID(tok, m.Data))
	m.Header.Set(central.HeaderStore, store)
	m.Header.Set(central.HeaderSeq, fmt.Sprint(lastSeq))
	return m
}

// TestRunSkipsCheckpoints: a store's checkpoints in its archive change
// nothing in its reconciliation: they are not movements, their Rx-Seq
// is not a sequence held, and they are not malformed records.
func TestRunSkipsCheckpoints(t *testing.T) {
	r := newRig(t, map[string][]string{central.ArchiveStreamName: {"S0001"}})
	now := time.Now()
	r.put(checkpointMsg("S0001", 2))
	for seq := uint64(1); seq <= 5; seq++ {
		r.put(archiveMsg("S0001", seq, "", "", now))
	}
	r.put(checkpointMsg("S0001", 9)) // a store that gave 9 once published
	r.fleet("S0001", 5)
	k := &asker{answer: allPending}
	rep, err := reconcile.Run(r.ctx, reconcile.Options{Conn: r.nc, Asker: k})
	if err != nil {
		t.Fatal(err)
	}
	s1 := storeOf(t, rep, "S0001")
	if s1.Held != 5 || s1.Missing != 0 || s1.Malformed != 0 || s1.Repeats != 0 || !s1.OK() || len(k.asked) != 0 {
		t.Errorf("S0001 with checkpoints in its archive: %+v, asked %v; want 5 held, nothing else", s1, k.asked)
	}
}
