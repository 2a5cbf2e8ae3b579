package durability_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/durability"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/testkit/natstest"
)

const sysUser, sysPassword = "sys", "sys-secret"

// withSystemUser gives the server a system account with a user, keeps
// clients without credentials in the global account (where the streams
// are) and opens the monitoring port on loopback.
func withSystemUser() natstest.Option {
	return func(o *hub.Options) {
		o.Configure = func(so *server.Options) {
			sys := server.NewAccount("SYS")
			so.Accounts = []*server.Account{sys}
			so.SystemAccount = "SYS"
			so.Users = []*server.User{{Username: sysUser, Password: sysPassword, Account: sys}, {Username: "app"}}
			so.NoAuthUser = "app"
			so.HTTPHost, so.HTTPPort = "127.0.0.1", server.RANDOM_PORT
		}
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// createStreams creates RX_MOVEMENTS with the given replicas and its
// archive with archiveReplicas.
func createStreams(t *testing.T, url string, replicas, archiveReplicas int) {
	t.Helper()
	js := natstest.JetStream(t, natstest.Connect(t, url))
	deadline := time.Now().Add(30 * time.Second)
	for _, cfg := range []jetstream.StreamConfig{
		central.StreamConfig(central.StreamOptions{Replicas: replicas}),
		central.ArchiveConfig(central.StreamOptions{Replicas: archiveReplicas}),
	} {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := js.CreateOrUpdateStream(ctx, cfg)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("create %s: %v", cfg.Name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func systemReport(t *testing.T, urls string) durability.Report {
	t.Helper()
	nc := natstest.Connect(t, urls, nats.UserInfo(sysUser, sysPassword))
	r, err := durability.FromSystem(testContext(t), nc, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// finding is the finding about a server or stream, failing when there is
// none.
func finding(t *testing.T, r durability.Report, server, stream string) durability.Finding {
	t.Helper()
	for _, f := range r.Findings {
		if f.Server == server && f.Stream == stream {
			return f
		}
	}
	t.Fatalf("no finding about server %q stream %q in %+v", server, stream, r.Findings)
	return durability.Finding{}
}

func serverName(t *testing.T, h *hub.Hub) string {
	t.Helper()
	return h.Server().Name()
}

func monitorURL(h *hub.Hub) string {
	return fmt.Sprintf("http://%s", h.Server().MonitorAddr())
}

// TestSingleServer: a server that fsyncs every write passes; its R1
// streams are a warning (a single server), over the system account and
// over the monitoring endpoint alike.
func TestSingleServer(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision(), withSystemUser())
	createStreams(t, srv.URL(), 1, 1)
	mon, err := durability.FromMonitor(testContext(t), nil, []string{monitorURL(srv.Hub())}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for how, r := range map[string]durability.Report{"system account": systemReport(t, srv.URL()), "monitoring": mon} {
		name := serverName(t, srv.Hub())
		if f := finding(t, r, name, ""); f.Severity != durability.OK || !strings.Contains(f.Detail, "always") {
			t.Errorf("%s: server: %+v, want ok", how, f)
		}
		for _, s := range []string{central.StreamName, central.ArchiveStreamName} {
			if f := finding(t, r, "", s); f.Severity != durability.Warning || f.Fix == "" || !strings.Contains(f.Detail, "single server") {
				t.Errorf("%s: %s: %+v, want a warning with a fix", how, s, f)
			}
		}
		if r.Worst() != durability.Warning || r.ClusterSize != 1 || len(r.Servers) != 1 || len(r.Streams) != 2 {
			t.Errorf("%s: report %+v", how, r)
		}
	}
}

// TestServerWithoutSyncAlways: a server that fsyncs only now and then is
// an error with its fix.
func TestServerWithoutSyncAlways(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision(), withSystemUser(), func(o *hub.Options) { o.NoSync = true })
	createStreams(t, srv.URL(), 1, 1)
	r := systemReport(t, srv.URL())
	f := finding(t, r, serverName(t, srv.Hub()), "")
	if f.Severity != durability.Error || !strings.Contains(f.Detail, "2m0s") || !strings.Contains(f.Fix, "sync_interval: always") {
		t.Errorf("server: %+v, want an error naming the interval and the fix", f)
	}
	if r.Worst() != durability.Error {
		t.Errorf("worst %s, want error", r.Worst())
	}
}

// TestClusterWithAnR1Archive: on a three-node cluster every server fsyncs
// and RX_MOVEMENTS has three replicas, but an archive with one replica is
// an error with its fix.
func TestClusterWithAnR1Archive(t *testing.T) {
	c := natstest.StartCluster(t, 3, withSystemUser())
	urls := strings.Join(c.URLs(), ",")
	createStreams(t, urls, 3, 1)
	// The cluster was provisioned with R3 streams, so the archive is scaled
	// down: poll until every server reports it as updated (awaited: the
	// servers' view of the archive's replicas), 30 s at most.
	var r durability.Report
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r = systemReport(t, urls)
		if archiveReplicas(r) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if r.ClusterSize != 3 || len(r.Servers) != 3 {
		t.Fatalf("cluster size %d, %d servers answered; want 3 and 3", r.ClusterSize, len(r.Servers))
	}
	for i := range 3 {
		if f := finding(t, r, serverName(t, c.Node(i)), ""); f.Severity != durability.OK {
			t.Errorf("node %d: %+v, want ok", i, f)
		}
	}
	if f := finding(t, r, "", central.StreamName); f.Severity != durability.OK || f.Detail != "R3 on a cluster of 3" {
		t.Errorf("%s: %+v, want ok", central.StreamName, f)
	}
	f := finding(t, r, "", central.ArchiveStreamName)
	if f.Severity != durability.Error || !strings.Contains(f.Detail, "R1 on a cluster of 3") || !strings.Contains(f.Fix, "--replicas 3") {
		t.Errorf("%s: %+v, want an error with the fix", central.ArchiveStreamName, f)
	}
}

// archiveReplicas is the largest replica count any server reports for the
// archive, 0 when none reports it.
func archiveReplicas(r durability.Report) int {
	n := 0
	for _, st := range r.Streams {
		if st.Name == central.ArchiveStreamName {
			n = max(n, st.Replicas)
		}
	}
	return n
}

// TestNotTheSystemAccount: a user of another account gets an error, never a
// report.
func TestNotTheSystemAccount(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision(), withSystemUser())
	nc := natstest.Connect(t, srv.URL())
	r, err := durability.FromSystem(testContext(t), nc, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "system account") {
		t.Fatalf("error %v, report %+v; want an error naming the system account", err, r)
	}
}

// TestMonitorURLCredentials: a monitoring URL with credentials is shown
// without them in the report and in errors, one that does not parse
// included.
func TestMonitorURLCredentials(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision(), withSystemUser())
	u := strings.Replace(monitorURL(srv.Hub()), "http://", "http://mon:Pw-S3cret@", 1)
	r, err := durability.FromMonitor(testContext(t), nil, []string{u}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.Source, "S3cret") || !strings.Contains(r.Source, srv.Hub().Server().MonitorAddr().String()) {
		t.Errorf("source %q", r.Source)
	}
	for _, bad := range []string{"http://mon:Pw-S3cret@[bad", "http://mon:Pw-S3cret%zz@127.0.0.1:1", "http://mon:Pw-S3cret@127.0.0.1:1"} {
		_, err := durability.FromMonitor(testContext(t), nil, []string{bad}, 10*time.Second)
		if err == nil || strings.Contains(err.Error(), "S3cret") || strings.Contains(err.Error(), "zz") {
			t.Errorf("%s: %v, want an error without the password", bad, err)
		}
	}
	// A comma in the password splits the URL in a list (--monitor-url
	// takes one).
	_, err = durability.FromMonitor(testContext(t), nil, []string{"http://mon:Pw-Se", "cret@127.0.0.1:1"}, 10*time.Second)
	if err == nil || strings.Contains(err.Error(), "Pw-Se") || strings.Contains(err.Error(), "cret") {
		t.Errorf("a comma in the password: %v, want an error without any of it", err)
	}
}
