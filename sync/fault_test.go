package sync

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/faultproxy"
	"github.com/rxedge/agent/testkit/natstest"
)

// retryWindow is the longest a movement can spend in its retry budget:
// the sum of the delay ceilings of all its attempts.
func retryWindow(p retry.Policy) time.Duration {
	var d time.Duration
	for a := 0; a < p.MaxAttempts; a++ {
		d += p.Ceiling(a)
	}
	return d
}

func TestBlackholeChargesNothing(t *testing.T) {
	srv := natstest.StartHub(t)
	px, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	o := testOptions(t, px.URL())
	o.Ordinary = retry.Policy{MaxAttempts: 5, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}
	o.Controlled = retry.Policy{MaxAttempts: 7, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}
	o.AttemptTimeout = time.Second
	r := startRig(t, o, func(s *Options) { s.NoBatch = true })
	r.enqueue(0, 100)
	r.waitSynced(100, 20*time.Second)

	// The network path goes dead: nothing arrives either way.
	px.Blackhole()
	r.enqueue(100, 400)
	window := 20 * max(retryWindow(o.Ordinary), retryWindow(o.Controlled))
	t.Logf("black hole for %s (20 × the retry window)", window)
	time.Sleep(window)

	s := r.stats()
	if s.Count(queue.Quarantined) != 0 || s.Count(queue.Pending) != 400 {
		t.Fatalf("during the black hole: %d pending, %d quarantined; want 400 and 0", s.Count(queue.Pending), s.Count(queue.Quarantined))
	}
	noAttemptsCharged(t, r.q)
	if c := r.e.Connection(); c.State == status.Online {
		t.Fatalf("state during the black hole = %+v, want offline or paused", c)
	}

	healed := time.Now()
	px.Pass()
	r.waitSynced(500, 30*time.Second)
	took := time.Since(healed)
	// Reconnect back-off (up to 3 s here) plus the resume jitter.
	if limit := o.ResumeJitter + 8*time.Second; took > limit {
		t.Fatalf("drained %s after healing, want within %s", took, limit)
	}
	t.Logf("drained %s after the network healed", took)
	exactlyOnce(t, srv.URL(), 500)
	noAttemptsCharged(t, r.q)
}

func TestStreamFullPausesThenResumes(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithStream(central.StreamOptions{MaxMsgs: 100}))
	r := startRig(t, testOptions(t, srv.URL()), func(s *Options) { s.NoBatch = true })
	r.enqueue(0, 150)
	r.waitSynced(100, 20*time.Second)
	waitState(t, r, status.Paused, "stream_full")
	s := r.stats()
	if s.Count(queue.Quarantined) != 0 || s.Count(queue.Pending) != 50 {
		t.Fatalf("paused with %d pending and %d quarantined, want 50 and 0", s.Count(queue.Pending), s.Count(queue.Quarantined))
	}
	noAttemptsCharged(t, r.q)

	// Central is given room.
	nc := natstest.Connect(t, srv.URL())
	changes, err := streams.Provision(context.Background(), natstest.JetStream(t, nc), central.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("central fixed: %v", changes)
	r.waitSynced(150, 20*time.Second)
	if c := r.e.Connection(); c.State != status.Online {
		t.Fatalf("after the fix: %+v", c)
	}
	exactlyOnce(t, srv.URL(), 150)
	if !strings.Contains(r.logs.String(), `"SYNC_PAUSED"`) || !strings.Contains(r.logs.String(), `"SYNC_RESUMED"`) {
		t.Fatal("no SYNC_PAUSED / SYNC_RESUMED log lines")
	}
}

// permissionsConf is a server whose store user may not publish its
// movements until grant is true.
func permissionsConf(storeDir string, port int, grant bool) string {
	publish := `"rx.status.S0001", "$JS.API.DIRECT.GET.RX_MOVEMENTS.rx.mv.S0001.>"`
	if grant {
		publish += `, "rx.mv.S0001.>"`
	}
	return fmt.Sprintf(`
listen: 127.0.0.1:%d
jetstream { store_dir: %q, sync_interval: always }
accounts {
  RX {
    jetstream: enabled
    users: [
      { user: admin, password: admin-pass }
      { user: S0001, password: store-pass,
        permissions: { publish: { allow: [%s] }, subscribe: { allow: ["_INBOX_S0001.>"] } } }
    ]
  }
}
`, port, storeDir, publish)
}

func TestPermissionViolationPausesThenResumes(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "server.conf")
	// Start once on a free port to learn it, then pin it in the file.
	os.WriteFile(conf, []byte(permissionsConf(filepath.Join(dir, "js"), -1, false)), 0o600)
	h, err := hub.Start(hub.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "js"), ConfigFile: conf, Provision: streams.Provision,
		ConnectOptions: []nats.Option{nats.UserInfo("admin", "admin-pass")}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()
	_, port, _ := net.SplitHostPort(h.Addr())
	p, _ := strconv.Atoi(port)
	writeConf := func(grant bool) {
		if err := os.WriteFile(conf, []byte(permissionsConf(filepath.Join(dir, "js"), p, grant)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeConf(false)

	o := testOptions(t, h.URL())
	o.NATS.User, o.NATS.Password = "S0001", "store-pass"
	r := startRig(t, o, func(s *Options) { s.NoBatch = true })
	r.enqueue(0, 50)
	waitState(t, r, status.Paused, "permission")
	if s := r.stats(); s.Count(queue.Quarantined) != 0 || s.Count(queue.Synced) != 0 {
		t.Fatalf("with no permission: %d synced, %d quarantined", s.Count(queue.Synced), s.Count(queue.Quarantined))
	}
	noAttemptsCharged(t, r.q)

	writeConf(true)
	if err := h.Server().Reload(); err != nil {
		t.Fatal(err)
	}
	r.waitSynced(50, 30*time.Second)
	noAttemptsCharged(t, r.q)
}

func TestClusterLeaderStoppedMidDrain(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	r := startRig(t, testOptions(t, c.URLs()...), func(s *Options) { s.BatchSize = 200 })
	const n = 5000
	r.enqueue(0, n)
	s := r.waitFor("the drain to start", 30*time.Second, func(s queue.Stats) bool { return s.Count(queue.Synced) >= 200 })
	leader := c.StreamLeader()
	c.StopNode(leader)
	if s.Count(queue.Synced) == n {
		t.Fatal("the drain finished before the leader was stopped")
	}
	t.Logf("stopped stream leader %d with %d of %d synced", leader, s.Count(queue.Synced), n)
	r.waitSynced(n, 90*time.Second)
	live := c.URLs()[(leader+1)%3]
	exactlyOnce(t, live, n)
}

func waitState(t *testing.T, r *rig, state, reason string) status.Connection {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := r.e.Connection()
		if c.State == state && strings.Contains(c.Reason, reason) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %+v, want %s with a reason containing %q", c, state, reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCredentialRotationIsAnOutage: central refuses the agent's password
// for a while (a rotation, an operator's mistake) and then accepts it
// again. The agent must keep trying and deliver, not give up on the
// connection for good as nats.go does by default after two refusals.
func TestCredentialRotationIsAnOutage(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "server.conf")
	write := func(port int, password string) {
		t.Helper()
		c := fmt.Sprintf(`
listen: 127.0.0.1:%d
jetstream { store_dir: %q, sync_interval: always }
accounts { RX { jetstream: enabled, users: [ { user: admin, password: admin-pass }, { user: S0001, password: %q } ] } }
`, port, filepath.Join(dir, "js"), password)
		if err := os.WriteFile(conf, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(-1, "store-pass")
	h, err := hub.Start(hub.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "js"), ConfigFile: conf, Provision: streams.Provision,
		ConnectOptions: []nats.Option{nats.UserInfo("admin", "admin-pass")}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()
	_, port, _ := net.SplitHostPort(h.Addr())
	p, _ := strconv.Atoi(port)

	o := testOptions(t, h.URL())
	o.NATS.User, o.NATS.Password = "S0001", "store-pass"
	o.NATS.ReconnectWait, o.NATS.ReconnectJitter = 100*time.Millisecond, 100*time.Millisecond
	r := startRig(t, o, func(s *Options) { s.NoBatch = true })
	r.enqueue(0, 10)
	r.waitSynced(10, 20*time.Second)

	write(p, "rotated")
	if err := h.Server().Reload(); err != nil {
		t.Fatal(err)
	}
	r.enqueue(10, 10)
	time.Sleep(3 * time.Second) // many refused reconnects
	if s := r.stats(); s.Count(queue.Synced) != 10 {
		t.Fatalf("%d synced with the password refused", s.Count(queue.Synced))
	}
	write(p, "store-pass")
	if err := h.Server().Reload(); err != nil {
		t.Fatal(err)
	}
	r.waitSynced(20, 30*time.Second)
	noAttemptsCharged(t, r.q)
}
