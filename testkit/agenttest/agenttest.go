// Package agenttest runs the store's agent inside a test's process
// (daemon.Run, as `agent run` does) and makes data files in the states the
// commands' tests need, for the tests of both binaries: the store's
// agent's local commands, and head office's commands that talk to a store
// over NATS. It is for tests only.
package agenttest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/daemon"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
)

// Run runs the agent in this process until the test ends and returns its
// ingest address ("" when it has none) once it is ready. It skips the
// test when the control socket's path would be too long for a unix socket.
func Run(t testing.TB, opts settings.Options, log *slog.Logger) string {
	t.Helper()
	if n := len(control.Endpoint(opts.DataDir)); n >= 104 {
		t.Skipf("the control socket's path in the temporary directory is %d bytes, over the limit of unix socket addresses", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, opts, log, daemon.Hooks{Ready: func(addr string) { ready <- addr }})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon.Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the agent did not stop within 15s")
		}
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		t.Fatalf("daemon.Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not become ready within 10s")
	}
	return ""
}

// Movement is one movement for the quarantine of a test data directory:
// its movement_id, and optionally its quarantine reason (default
// permanent:too_large), rx_ref, note and schedule.
type Movement struct {
	ID, Reason, RxRef, Note, Schedule string
}

// Quarantined makes a data directory for store whose file holds the
// movements quarantined (in order, oldest first) and returns it with their
// keys. No agent runs for it.
func Quarantined(t testing.TB, store string, mvs ...Movement) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: store})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	keys := make([]string, len(mvs))
	for i, m := range mvs {
		var b strings.Builder
		fmt.Fprintf(&b, `{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":2,"unit":"EA","occurred_at":%q`,
			m.ID, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		for _, f := range [][2]string{{"rx_ref", m.RxRef}, {"note", m.Note}, {"schedule", m.Schedule}} {
			if f[1] != "" {
				fmt.Fprintf(&b, `,%q:%q`, f[0], f[1])
			}
		}
		b.WriteString("}")
		p, es := movement.Prepare([]byte(b.String()), store, time.Now())
		if es != nil {
			t.Fatalf("prepare %s: %v", m.ID, es)
		}
		res, err := q.Enqueue([]movement.Prepared{p})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Lease(time.Now().Add(time.Second), 1<<20); err != nil {
			t.Fatal(err)
		}
		reason := m.Reason
		if reason == "" {
			reason = "permanent:too_large"
		}
		if err := q.Settle(queue.Settlement{Quarantines: []queue.QuarantineAt{{
			Seq: res[0].Seq, Reason: reason, Charge: true, ConnState: "online", AgentVersion: "test",
			Failure: queue.Failure{Kind: reason, Text: "maximum payload exceeded"},
		}}}); err != nil {
			t.Fatal(err)
		}
		keys[i] = p.KeyString()
	}
	return dir, keys
}
