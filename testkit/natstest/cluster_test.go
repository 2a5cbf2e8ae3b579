package natstest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/testkit/natstest"
)

func TestClusterStreamLeaderFailover(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc := natstest.Connect(t, strings.Join(c.URLs(), ","), agentOptions...)
	js := natstest.JetStream(t, nc)

	stream, err := js.Stream(testContext(t), central.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if got := stream.CachedInfo().Config.Replicas; got != 3 {
		t.Errorf("stream replicas = %d, want 3", got)
	}
	ack, err := publish(testContext(t), js, "k1")
	if err != nil {
		t.Fatalf("publish: %v", err)
	}

	// Unlike a single server, an R3 stream checks Nats-Msg-Id before
	// Nats-Expected-Last-Subject-Sequence: a resend inside the duplicate
	// window is a duplicate PubAck, not error 10071.
	dup, err := publish(testContext(t), js, "k1")
	if err != nil {
		t.Fatalf("resend on R3: error = %v, want a duplicate PubAck", err)
	}
	if !dup.Duplicate || dup.Sequence != ack.Sequence {
		t.Errorf("resend on R3: PubAck = %+v, want Duplicate=true sequence %d", dup, ack.Sequence)
	}

	old := c.StreamLeader()
	c.StopNode(old)
	leader := c.WaitStreamLeader(t)
	if leader == old {
		t.Fatalf("stream leader is still the stopped node %d", old)
	}

	// The client may have been on the stopped node: publishes fail until it
	// reconnects and the new leader takes writes. Retrying the same key is
	// safe, which is the point of the headers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := publish(testContext(t), js, "k2")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish after stopping leader node %d: still failing after 20s: %v", old, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	c.RestartNode(t, old)
	info, err := stream.Info(testContext(t))
	if err != nil {
		t.Fatalf("stream info after restart: %v", err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("stream holds %d messages, want 2", info.State.Msgs)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream cluster info = %+v, want a leader and 2 replicas", info.Cluster)
	}
	for _, r := range info.Cluster.Replicas {
		if r.Offline {
			t.Errorf("replica %s is offline after its node restarted", r.Name)
		}
	}
}

// TestClusterPartitioned starts a cluster with the generated per-store
// configuration and two partitions: every movement stream and archive is
// R3 in the account RX, and a store's publish to its usual subject lands in
// its partition's stream.
func TestClusterPartitioned(t *testing.T) {
	var conf bytes.Buffer
	if err := provision.CentralConfig(&conf, []string{"S0001", "S0002"}, 2); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "central.conf")
	if err := os.WriteFile(path, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	c := natstest.StartCluster(t, 3,
		natstest.WithConfigFile(path, nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")),
		natstest.WithStream(central.StreamOptions{Partitions: 2}))
	admin := natstest.JetStream(t, natstest.Connect(t, strings.Join(c.URLs(), ","), nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")))
	for _, name := range []string{"RX_MOVEMENTS_0", "RX_MOVEMENTS_1", "RX_ARCHIVE_0", "RX_ARCHIVE_1"} {
		if c.LeaderOf(name) < 0 {
			t.Errorf("%s has no leader", name)
		}
		s, err := admin.Stream(testContext(t), name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := s.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("%s replicas = %d, want 3", name, got)
		}
	}
	store := natstest.JetStream(t, natstest.Connect(t, strings.Join(c.URLs(), ","), nats.UserInfo("S0001", "CHANGE-ME-S0001"), nats.CustomInboxPrefix("_INBOX_S0001")))
	m := nats.NewMsg(central.Subject("S0001", "k1"))
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	ack, err := store.PublishMsg(testContext(t), m)
	if err != nil {
		t.Fatalf("publish as S0001: %v", err)
	}
	if want := central.MovementStream(central.Partition("S0001", 2), 2); ack.Stream != want {
		t.Errorf("PubAck stream = %s, want %s", ack.Stream, want)
	}
}
