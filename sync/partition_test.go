package sync

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestClusterPartitionLeaderStoppedMidDrain runs a real agent, with its
// store's own identity, against a three-node cluster with two partitions
// and the generated per-store-account configuration, every stream R3. The
// agent publishes to rx.mv.S0001.<key> as always; its account's imports put
// the movements into partition 1. The leader of that partition's movement
// stream is stopped while a backlog drains. Afterwards every key is held
// exactly once in RX_MOVEMENTS_1 and exactly once in RX_ARCHIVE_1, and
// nothing is in partition 0.
func TestClusterPartitionLeaderStoppedMidDrain(t *testing.T) {
	const parts = 2
	p := central.Partition(testStore, parts)
	var conf bytes.Buffer
	if err := provision.CentralConfig(&conf, []string{testStore, "S0002"}, parts); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "central.conf")
	if err := os.WriteFile(path, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := []nats.Option{nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")}
	c := natstest.StartCluster(t, 3, natstest.WithConfigFile(path, admin...),
		natstest.WithStream(central.StreamOptions{Partitions: parts}))
	movements, archive := central.MovementStream(p, parts), central.ArchiveStream(p, parts)

	o := testOptions(t, c.URLs()...)
	o.NATS.User, o.NATS.Password = testStore, "CHANGE-ME-"+testStore
	r := startRig(t, o, func(s *Options) { s.BatchSize = 200 })
	const n = 3000
	r.enqueue(0, n)
	s := r.waitFor("the drain to start", 30*time.Second, func(s queue.Stats) bool { return s.Count(queue.Synced) >= 200 })
	leader := c.LeaderOf(movements)
	if leader < 0 {
		t.Fatalf("no leader for %s", movements)
	}
	c.StopNode(leader)
	if s.Count(queue.Synced) == n {
		t.Fatal("the drain finished before the leader was stopped")
	}
	t.Logf("stopped %s's leader, node %d, with %d of %d synced", movements, leader, s.Count(queue.Synced), n)
	r.waitSynced(n, 90*time.Second)

	live := c.URLs()[(leader+1)%3]
	nc := natstest.Connect(t, live, admin...)
	js := natstest.JetStream(t, nc)
	// One bound for every read below, longer than the 60 s the archive is
	// given to copy: on a loaded machine the reads alone take a while.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for q := range parts {
		name := central.MovementStream(q, parts)
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(central.PartitionSubjects(q, parts)))
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(0)
		if q == p {
			want = n
		}
		if info.State.Msgs != want || uint64(len(info.State.Subjects)) != want {
			t.Errorf("%s holds %d messages on %d subjects, want exactly %d of each", name, info.State.Msgs, len(info.State.Subjects), want)
		}
	}

	// The archives, read as head office's audit user does.
	audit := natstest.Connect(t, live, nats.UserInfo("audit", "CHANGE-ME-audit"), nats.CustomInboxPrefix("_INBOX_audit"))
	ajs, err := jetstream.NewWithAPIPrefix(audit, central.AuditAPIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := ajs.Stream(ctx, archive)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().State.Msgs; got >= n {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%s holds %d messages after 60 s, want %d (awaited: the source copying them)", archive, got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The read starts over while the cluster still settles after the
	// leader's stop (a consumer request can find no responder then).
	var keys map[string]int
	readBy := time.Now().Add(60 * time.Second)
	for {
		var err error
		keys, err = readArchiveKeys(ctx, t, ajs, archive, n)
		if err == nil {
			break
		}
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(readBy) {
			t.Fatalf("reading %s: %v", archive, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, err := ajs.Stream(ctx, archive)
	if err != nil {
		t.Fatal(err)
	}
	if msgs := st.CachedInfo().State.Msgs; msgs != n || len(keys) != n {
		t.Errorf("%s holds %d messages with %d distinct keys, want exactly %d of each", archive, msgs, len(keys), n)
	}
	for k, count := range keys {
		if count != 1 {
			t.Errorf("%s holds key %s %d times", archive, k, count)
		}
	}
	for q := range parts {
		if q == p {
			continue
		}
		other, err := ajs.Stream(ctx, central.ArchiveStream(q, parts))
		if err != nil {
			t.Fatal(err)
		}
		if msgs := other.CachedInfo().State.Msgs; msgs != 0 {
			t.Errorf("%s holds %d messages, want none", central.ArchiveStream(q, parts), msgs)
		}
	}
}

// readArchiveKeys reads archive whole with an ordered consumer and counts
// its messages per key.
func readArchiveKeys(ctx context.Context, t *testing.T, js jetstream.JetStream, archive string, n uint64) (map[string]int, error) {
	keys := map[string]int{}
	cons, err := js.OrderedConsumer(ctx, archive, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for uint64(len(keys)) < n {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if !strings.HasPrefix(m.Subject(), central.ArchivePrefix+testStore) {
				t.Errorf("archived subject %q", m.Subject())
			}
			keys[central.KeyOfMsgID(m.Headers().Get(jetstream.MsgIDHeader))]++
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if got == 0 {
			break
		}
	}
	return keys, nil
}
