package migrate_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/migrate"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/testkit/natstest"
)

const partitions = 4

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// createStreams creates the old one-partition layout and, with n > 1, the
// partitions (what `hq provision --partitions n` creates).
func createStreams(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	createReplicated(t, js, n, 1)
}

// createReplicated is createStreams with the given replicas.
func createReplicated(t *testing.T, js jetstream.JetStream, n, replicas int) {
	t.Helper()
	ctx := testContext(t)
	for p := range max(n, 1) {
		o := central.StreamOptions{Partitions: n, Partition: p, Replicas: replicas}
		for _, cfg := range []jetstream.StreamConfig{central.StreamConfig(o), central.ArchiveConfig(o)} {
			if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
				t.Fatalf("create %s: %v", cfg.Name, err)
			}
		}
	}
}

// mv is a movement of a store, as an agent publishes it.
func mv(store string, i int, variant string) central.Message {
	payload := fmt.Appendf(nil, `{"movement_id":"M%05d","store_id":%q,"quantity":"1"%s}`, i, store, variant)
	sum := sha256.Sum256(payload)
	key := sha256.Sum256([]byte(store + "\x00" + fmt.Sprintf("M%05d", i)))
	return central.Message{Store: store, Key: hex.EncodeToString(key[:16]), Digest: hex.EncodeToString(sum[:]),
		Seq: uint64(i + 1), EnqueuedAt: time.Now(), Payload: payload}
}

// publish stores messages, each to the subject given, and fails on any
// refusal.
func publish(t *testing.T, js jetstream.JetStream, msgs []*nats.Msg) {
	t.Helper()
	var futs []jetstream.PubAckFuture
	for _, m := range msgs {
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				t.Fatalf("publish %s: duplicate", f.Msg().Subject)
			}
		case err := <-f.Err():
			t.Fatalf("publish %s: %v", f.Msg().Subject, err)
		case <-time.After(30 * time.Second):
			t.Fatal("publish: no acknowledgement in 30s")
		}
	}
}

// oldOrNew is m as its store's agent sent it: in the full form for the
// stores with an even number (agents of the version before the compact
// headers), in the compact form for the others.
func oldOrNew(m central.Message) *nats.Msg {
	if n, _ := strconv.Atoi(strings.TrimPrefix(m.Store, "S")); n%2 == 0 {
		return natstest.FullForm(m, "")
	}
	return m.Msg()
}

// toPartition is the message an agent's resend becomes after the servers
// were switched to the partitioned configuration (the store account's
// import maps its subject onto the partition's).
func toPartition(m central.Message) *nats.Msg {
	msg := m.Msg()
	p := central.Partition(m.Store, partitions)
	msg.Subject = central.PartitionSubject(p, partitions, m.Store, m.Key)
	return msg
}

// keyCounts counts the messages of a stream by movement key (from
// Nats-Msg-Id), reading each sequence with a direct get. On a cluster any
// replica may answer one, so a "not found" from a replica still catching
// up is asked again.
func keyCounts(t *testing.T, js jetstream.JetStream, stream string, into map[string]int) {
	t.Helper()
	ctx := testContext(t)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	st := s.CachedInfo().State
	if st.Msgs == 0 {
		return
	}
	if st.LastSeq-st.FirstSeq+1 != st.Msgs {
		t.Fatalf("%s holds %d messages between sequences %d and %d: some were removed", stream, st.Msgs, st.FirstSeq, st.LastSeq)
	}
	deadline := time.Now().Add(30 * time.Second)
	for seq := st.FirstSeq; seq <= st.LastSeq; seq++ {
		for {
			m, err := s.GetMsg(ctx, seq)
			if err == nil {
				into[central.KeyOfMsgID(m.Header.Get(central.HeaderMsgID))]++
				break
			}
			if !errors.Is(err, jetstream.ErrMsgNotFound) || time.Now().After(deadline) {
				t.Fatalf("read %s sequence %d: %v", stream, seq, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitArchives polls the partitions' archives until together they hold
// want messages and their sources have nothing left to deliver. Its
// deadline is tied to what it awaits: it fails when the archives stop
// growing for archiveStall, however long a loaded machine takes over all.
func waitArchives(t *testing.T, js jetstream.JetStream, want uint64) {
	t.Helper()
	var last uint64
	deadline := time.Now().Add(archiveStall)
	for {
		var got uint64
		lag := false
		for p := range partitions {
			s, err := js.Stream(testContext(t), central.ArchiveStream(p, partitions))
			if err != nil {
				t.Fatal(err)
			}
			info := s.CachedInfo()
			got += info.State.Msgs
			for _, src := range info.Sources {
				lag = lag || src.Lag > 0
			}
		}
		if got == want && !lag {
			return
		}
		if got > last {
			last, deadline = got, time.Now().Add(archiveStall)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archives hold %d messages (sources lagging: %v) and took none for %s, want %d", got, lag, archiveStall, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// archiveStall is how long the archives may take no message before
// waitArchives calls their sourcing stuck.
const archiveStall = time.Minute

// TestMigrateExactlyOnce migrates the movements of 50 stores from a
// one-partition central into four partitions; agents then resend some
// keys to the partitions (after the servers' switch, before the second
// run), one of them with another payload; the second run catches what the
// old stream took meanwhile. Every key ends exactly once in the partitions'
// movement streams and exactly once in their archives, the conflict is
// reported and left alone, and a third run migrates nothing.
func TestMigrateExactlyOnce(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	createStreams(t, js, 1)
	createStreams(t, js, partitions)

	// The stores with an even number ran agents of the version before
	// the compact headers: the old stream holds their movements in the
	// full form, and the migration copies each in its own form.
	const stores, perStore = 50, 40
	var first []*nats.Msg
	for s := range stores {
		for i := range perStore {
			first = append(first, oldOrNew(mv(fmt.Sprintf("S%04d", s), i, "")))
		}
	}
	publish(t, js, first)

	ctx := testContext(t)
	o := migrate.Options{Partitions: partitions}
	sum, err := migrate.Run(ctx, nc, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first run: %d migrated in %.2fs, %.0f records/s", sum.Migrated, sum.Seconds, sum.RecordsPerSecond)
	if sum.Migrated != stores*perStore || sum.Already != 0 || !sum.OK() || sum.Total != stores*perStore {
		t.Fatalf("first run: %+v", sum)
	}
	var spread uint64
	for _, n := range sum.PerPartition {
		if n > 0 {
			spread++
		}
	}
	if spread != partitions {
		t.Errorf("movements per partition %v: want every partition used", sum.PerPartition)
	}

	// Before the switch the old stream takes ten more movements of each of
	// two stores.
	var late []central.Message
	for _, s := range []string{"S0003", "S0042"} {
		for i := perStore; i < perStore+10; i++ {
			late = append(late, mv(s, i, ""))
		}
	}
	var msgs []*nats.Msg
	for _, m := range late {
		msgs = append(msgs, oldOrNew(m))
	}
	publish(t, js, msgs)
	// After the switch: agents that lost the acknowledgement resend four
	// of them, now landing in the partitions (in the compact form: S0042's
	// agent was upgraded meanwhile, so the migration compares the digest
	// of its full-form original with the compact copy's); another store
	// resends one of the first run's (taken already), which the partition
	// refuses.
	publish(t, js, []*nats.Msg{toPartition(late[0]), toPartition(late[1]), toPartition(late[12]), toPartition(late[19])})
	if _, err := js.PublishMsg(ctx, toPartition(mv("S0007", 3, ""))); !isWrongLast(err) {
		t.Fatalf("resend of a migrated key: %v, want 10071", err)
	}
	// And one movement with the key of a late one but another payload.
	clash := mv("S0042", perStore+5, `,"note":"edited"`)
	publish(t, js, []*nats.Msg{toPartition(clash)})

	sum, err = migrate.Run(ctx, nc, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second run: %d already migrated in %.2fs, %.0f records/s", sum.Already, sum.Seconds, sum.RecordsPerSecond)
	total := uint64(stores*perStore + len(late))
	if sum.Read != total || sum.Migrated != uint64(len(late))-5 || sum.Already != stores*perStore+4 {
		t.Errorf("second run read %d, migrated %d, already %d; want %d, %d, %d", sum.Read, sum.Migrated, sum.Already,
			total, len(late)-5, stores*perStore+4)
	}
	if len(sum.Conflicts) != 1 || sum.Conflicts[0].Key != clash.Key || sum.Conflicts[0].Store != "S0042" || len(sum.Failures) != 0 {
		t.Fatalf("second run: conflicts %+v failures %+v, want the one clash", sum.Conflicts, sum.Failures)
	}

	sum, err = migrate.Run(ctx, nc, o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Migrated != 0 || sum.Already != total-1 || len(sum.Conflicts) != 1 {
		t.Errorf("third run migrated %d, already %d, conflicts %d: want 0, %d, 1", sum.Migrated, sum.Already, len(sum.Conflicts), total-1)
	}

	// Exactly once, by key, in the movement streams and in the archives.
	moved, archived := map[string]int{}, map[string]int{}
	for p := range partitions {
		keyCounts(t, js, central.MovementStream(p, partitions), moved)
	}
	waitArchives(t, js, total)
	for p := range partitions {
		keyCounts(t, js, central.ArchiveStream(p, partitions), archived)
	}
	for name, counts := range map[string]map[string]int{"movement streams": moved, "archives": archived} {
		if len(counts) != int(total) {
			t.Errorf("the partitions' %s hold %d keys, want %d", name, len(counts), total)
		}
		for k, n := range counts {
			if n != 1 {
				t.Errorf("the partitions' %s hold key %s %d times", name, k, n)
			}
		}
	}
	// The clash kept the partition's copy: never overwritten.
	p := central.Partition("S0042", partitions)
	s, err := js.Stream(ctx, central.MovementStream(p, partitions))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetLastMsgForSubject(ctx, central.PartitionSubject(p, partitions, "S0042", clash.Key))
	if err != nil {
		t.Fatal(err)
	}
	if central.DigestOf(got.Header) != clash.Digest {
		t.Error("the conflicting key was overwritten in its partition")
	}
}

func isWrongLast(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// TestMigrateRefusesWithoutPartitions: nothing is read or written until
// every partition's movement stream and archive exist.
func TestMigrateRefusesWithoutPartitions(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	createStreams(t, js, 1)
	publish(t, js, []*nats.Msg{mv("S0001", 1, "").Msg()})
	ctx := testContext(t)
	if _, err := js.CreateStream(ctx, central.StreamConfig(central.StreamOptions{Partitions: 2, Partition: 0})); err != nil {
		t.Fatal(err)
	}
	sum, err := migrate.Run(ctx, nc, migrate.Options{Partitions: 2})
	if !errors.Is(err, migrate.ErrMissingStream) {
		t.Fatalf("error %v, want ErrMissingStream", err)
	}
	for _, name := range []string{"RX_ARCHIVE_0", "RX_MOVEMENTS_1", "RX_ARCHIVE_1"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	if sum.Read != 0 {
		t.Errorf("read %d movements before refusing", sum.Read)
	}
	if _, err := migrate.Run(ctx, nc, migrate.Options{Partitions: 1}); err == nil {
		t.Error("one partition: no error")
	}
}

// TestMigrateWithOnlyItsGrants migrates as an identity allowed to publish
// only to Grants (and to read its own inbox), as central's administrator
// is configured; without one of them it says which was denied.
func TestMigrateWithOnlyItsGrants(t *testing.T) {
	grants := migrate.Grants("", partitions)
	user := func(allow []string) *server.User {
		return &server.User{Username: "admin", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: allow},
			Subscribe: &server.SubjectPermission{Allow: []string{central.InboxPrefix("admin") + ".>"}},
		}}
	}
	for _, tc := range []struct {
		name  string
		allow []string
	}{
		{"all grants", grants},
		{"no info of the last archive", slices.DeleteFunc(slices.Clone(grants), func(g string) bool {
			return g == "$JS.API.STREAM.INFO."+central.ArchiveStream(partitions-1, partitions)
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.StartHub(t, natstest.WithSkipProvision(), func(o *hub.Options) {
				o.Configure = func(so *server.Options) {
					so.Users = []*server.User{{Username: "root"}, user(tc.allow)}
					so.NoAuthUser = "root"
				}
			})
			js := natstest.JetStream(t, natstest.Connect(t, srv.URL()))
			createStreams(t, js, 1)
			createStreams(t, js, partitions)
			var msgs []*nats.Msg
			for s := range 10 {
				msgs = append(msgs, mv(fmt.Sprintf("S%04d", s), 1, "").Msg())
			}
			publish(t, js, msgs)
			nc := natstest.Connect(t, srv.URL(), nats.UserInfo("admin", "pw"), nats.CustomInboxPrefix(central.InboxPrefix("admin")),
				nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			o := migrate.Options{Partitions: partitions, Timeout: 2 * time.Second}
			for run := range 2 {
				sum, err := migrate.Run(testContext(t), nc, o)
				if len(tc.allow) < len(grants) {
					if err == nil || !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), "RX_ARCHIVE_3") {
						t.Fatalf("error %v, want the permissions violation named", err)
					}
					return
				}
				if err != nil || !sum.OK() || sum.Migrated+sum.Already != 10 || run == 1 && sum.Already != 10 {
					t.Fatalf("run %d: %+v, %v", run, sum, err)
				}
			}
		})
	}
}

// TestMigrateOnACluster migrates into R3 partitions on a three-node
// cluster, where a republished id still inside the duplicate window is
// answered "duplicate" before its subject is checked: the second run
// finds every key by its digest all the same, and every key is in the
// partitions once.
func TestMigrateOnACluster(t *testing.T) {
	c := natstest.StartCluster(t, 3) // RX_MOVEMENTS, R3
	nc := natstest.Connect(t, strings.Join(c.URLs(), ","))
	js := natstest.JetStream(t, nc)
	createReplicated(t, js, 1, 3)
	createReplicated(t, js, partitions, 3)
	var msgs []*nats.Msg
	for s := range 20 {
		for i := range 20 {
			msgs = append(msgs, mv(fmt.Sprintf("S%04d", s), i, "").Msg())
		}
	}
	publish(t, js, msgs)
	// An agent resends one of them into its partition first.
	publish(t, js, []*nats.Msg{toPartition(mv("S0011", 7, ""))})

	// A loaded machine can take a partition's leader away for a while:
	// the migration then waits out its request timeout and tries again,
	// so a run may take far longer than its usual seconds. It fails only
	// when it stops settling movements.
	for run, want := range []struct{ migrated, already uint64 }{{399, 1}, {0, 400}} {
		w := watchProgress(t, fmt.Sprintf("run %d", run+1))
		sum, err := migrate.Run(w.ctx, nc, migrate.Options{Partitions: partitions, Progress: w.progress})
		w.stop()
		if err != nil {
			t.Fatalf("run %d: %v (%v)", run+1, err, context.Cause(w.ctx))
		}
		if !sum.OK() || sum.Migrated != want.migrated || sum.Already != want.already {
			t.Fatalf("run %d: %+v, want %d migrated and %d already", run, sum, want.migrated, want.already)
		}
	}
	moved, archived := map[string]int{}, map[string]int{}
	for p := range partitions {
		keyCounts(t, js, central.MovementStream(p, partitions), moved)
	}
	waitArchives(t, js, 400)
	for p := range partitions {
		keyCounts(t, js, central.ArchiveStream(p, partitions), archived)
	}
	for name, counts := range map[string]map[string]int{"movement streams": moved, "archives": archived} {
		if len(counts) != 400 {
			t.Errorf("the partitions' %s hold %d keys, want 400", name, len(counts))
		}
		for k, n := range counts {
			if n != 1 {
				t.Errorf("the partitions' %s hold key %s %d times", name, k, n)
			}
		}
	}
}

// stallLimit is how long a migration may settle no movement before the
// test calls it stuck: above the longest a movement may legitimately
// take (six attempts, each up to migrate.DefaultTimeout, then a direct
// get of its copy), so only a migration that stopped moving fails.
const stallLimit = 6*migrate.DefaultTimeout + time.Minute

// progressWatch is a context that ends when a migration has settled no
// movement for stallLimit, with a cause naming the run and how far it got.
type progressWatch struct {
	ctx      context.Context
	progress func(done, total uint64)
	stop     func()
}

func watchProgress(t *testing.T, what string) progressWatch {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	type tick struct{ done, total uint64 }
	ticks := make(chan tick, 1)
	stopped := make(chan struct{})
	go func() {
		var last tick
		timer := time.NewTimer(stallLimit)
		defer timer.Stop()
		for {
			select {
			case last = <-ticks:
				timer.Reset(stallLimit)
			case <-timer.C:
				cancel(fmt.Errorf("%s: no movement settled for %s, %d of %d settled", what, stallLimit, last.done, last.total))
				return
			case <-stopped:
				return
			}
		}
	}()
	return progressWatch{ctx: ctx, stop: func() { close(stopped) }, progress: func(done, total uint64) {
		select {
		case <-ticks: // keep only the latest
		default:
		}
		ticks <- tick{done, total}
	}}
}

// checkpointMsg is a store's checkpoint as its agent publishes it
// (central/ledger; the headers of notary.Msg).
func checkpointMsg(store string, size int64) *nats.Msg {
	tok := ledger.CheckpointToken("0123456789abcdef", size)
	m := nats.NewMsg(central.Subject(store, tok))
	m.Data = fmt.Appendf(nil, `{"note":"checkpoint %d","prev_size":0}`, size)
	sum := sha256.Sum256(m.Data)
	m.Header.Set(central.HeaderMsgID, ledger.CheckpointMsgID(tok, m.Data))
	m.Header.Set(central.HeaderExpectLast, "0")
	m.Header.Set(central.HeaderStore, store)
	m.Header.Set(central.HeaderDigest, hex.EncodeToString(sum[:]))
	m.Header.Set(central.HeaderSeq, fmt.Sprint(size))
	return m
}

// TestMigrateCopiesCheckpoints: a store's checkpoints are copied into its
// partition like its movements, once, under the same token, with their
// headers and body unchanged.
func TestMigrateCopiesCheckpoints(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	createStreams(t, js, 1)
	createStreams(t, js, partitions)
	cp := checkpointMsg("S0042", 2)
	publish(t, js, []*nats.Msg{mv("S0042", 0, "").Msg(), mv("S0042", 1, "").Msg(), cp})

	ctx := testContext(t)
	sum, err := migrate.Run(ctx, nc, migrate.Options{Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Migrated != 3 || !sum.OK() {
		t.Fatalf("run: %+v, want the two movements and the checkpoint migrated", sum)
	}
	p := central.Partition("S0042", partitions)
	s, err := js.Stream(ctx, central.MovementStream(p, partitions))
	if err != nil {
		t.Fatal(err)
	}
	tok := ledger.CheckpointToken("0123456789abcdef", 2)
	got, err := s.GetLastMsgForSubject(ctx, central.PartitionSubject(p, partitions, "S0042", tok))
	if err != nil {
		t.Fatalf("the checkpoint is not in its partition: %v", err)
	}
	if string(got.Data) != string(cp.Data) || got.Header.Get(central.HeaderMsgID) != cp.Header.Get(central.HeaderMsgID) || got.Header.Get(central.HeaderSeq) != "2" {
		t.Fatalf("migrated checkpoint %q %v, want %q", got.Data, got.Header, cp.Data)
	}
	waitArchives(t, js, 3)
	if sum, err = migrate.Run(ctx, nc, migrate.Options{Partitions: partitions}); err != nil || sum.Migrated != 0 || sum.Already != 3 {
		t.Fatalf("second run: %+v, %v; want everything already migrated", sum, err)
	}
}
