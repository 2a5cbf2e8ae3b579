package natstest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/internal/natstest"
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
