package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/daemon"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestRemoteFleetView runs the fleet view against the production
// configuration generated for three stores: S0001's agent runs, S0002's
// agent ran and was stopped, and someone holding S0003's credentials
// tries to make S0002 look healthy and to pass itself off as S0001. The
// view names all three for what they are and exits 3.
func TestRemoteFleetView(t *testing.T) {
	stores := []string{"S0001", "S0002", "S0003"}
	dir := t.TempDir()
	config := filepath.Join(dir, "central.conf")
	var b bytes.Buffer
	if err := provision.CentralConfig(&b, stores, 1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	roster := filepath.Join(dir, "roster")
	if err := os.WriteFile(roster, []byte(strings.Join(stores, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := natstest.StartHub(t, natstest.WithConfigFile(config, nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")))
	ops := natstest.Connect(t, h.URL(), nats.UserInfo("ops", "CHANGE-ME-ops"), nats.CustomInboxPrefix("_INBOX_ops"))

	healthy := startStoreAgent(t, h.URL(), "S0001")
	defer healthy()
	stopped := startStoreAgent(t, h.URL(), "S0002")
	seen := func(store string) bool {
		entries, err := fleet.Read(context.Background(), ops)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Store == store {
				return true
			}
		}
		return false
	}
	pollUntil(t, "S0001 and S0002 in the fleet view", func() bool { return seen("S0001") && seen("S0002") })
	stopped()

	// The attacker, as S0003.
	spoof := natstest.Connect(t, h.URL(), nats.UserInfo("S0003", "CHANGE-ME-S0003"), nats.CustomInboxPrefix("_INBOX_S0003"))
	fake, _ := json.Marshal(command.Summary{StoreID: "S0002", State: status.Online, GeneratedAt: time.Now()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := spoof.RequestWithContext(ctx, central.FleetSubject("S0002"), fake)
	cancel()
	if err == nil {
		t.Fatal("S0003 wrote S0002's key")
	}
	fake, _ = json.Marshal(command.Summary{StoreID: "S0001", State: status.Online, GeneratedAt: time.Now()})
	if err := remote.PublishSummary(context.Background(), spoof, "S0003", &status.Status{StoreID: "S0001", Connection: status.Connection{State: status.Online}}); err != nil {
		t.Fatalf("S0003 writes its own key: %v", err)
	}
	// An answer on the old scatter-gather subject is refused by the server.
	if sub, err := spoof.Subscribe(command.Subject(central.FleetToken, ">"), func(m *nats.Msg) { m.Respond(fake) }); err == nil {
		defer sub.Unsubscribe()
	}

	args := []string{"remote", "status", "--fleet", "--roster", roster, "--stale", "1s", "--silent", "1s",
		"--server", h.URL(), "--user", "ops", "--password", "CHANGE-ME-ops"}
	var out string
	pollUntil(t, "S0002 silent", func() bool {
		var code int
		out, _, code = runCLI(t, append(args, "--json")...)
		var view []fleet.Store
		if err := json.Unmarshal([]byte(out), &view); err != nil || code != cli.ExitAttention || len(view) != 3 {
			t.Fatalf("fleet --json: exit %d, %v\n%s", code, err, out)
		}
		return view[1].State == fleet.Silent
	})
	var view []fleet.Store
	json.Unmarshal([]byte(out), &view)
	want := []string{"S0001 ok", "S0002 silent", "S0003 unverifiable"}
	for i, v := range view {
		if got := v.Store + " " + v.State; got != want[i] {
			t.Errorf("store %d: %s, want %s (%q)", i, got, want[i], v.Problems)
		}
	}
	stdout, stderr, code := runCLI(t, args...)
	if code != cli.ExitAttention || !strings.Contains(stdout, "S0003 (unverifiable): its summary names store \"S0001\"") || !strings.Contains(stdout, "S0002 (silent)") {
		t.Errorf("fleet: exit %d, want %d\n%s%s", code, cli.ExitAttention, stdout, stderr)
	}
}

// startStoreAgent runs the agent of store against the server at url with
// the generated configuration's credentials, and returns what stops it.
func startStoreAgent(t *testing.T, url, store string) (stop func()) {
	t.Helper()
	dir := t.TempDir()
	if n := len(control.Endpoint(dir)); n >= 104 {
		t.Skipf("the control socket's path is %d bytes, over the limit of unix socket addresses", n)
	}
	c := settings.Config{StoreID: store, DataDir: dir}
	c.Ingest.Listen = "off"
	c.NATS.Servers = []string{url}
	c.NATS.User, c.NATS.Password = store, "CHANGE-ME-"+store
	c.Sync.ResumeJitter = 10 * time.Millisecond
	c.Sync.HeartbeatInterval = 200 * time.Millisecond
	opts, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, opts, slog.New(slog.DiscardHandler), daemon.Hooks{}) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent %s: %v", store, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("agent %s did not stop within 15s", store)
		}
	}
	t.Cleanup(stop)
	return stop
}

// pollUntil polls cond against a real server until it holds, for at most
// 15 seconds.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
