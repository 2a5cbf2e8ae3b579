package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/daemon"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
)

// TestLedgerKeyStatusAndRotation: a running agent makes its signing key at
// start and shows its public key in `agent status --json` and the plain
// status; `agent ledger rotate-key` replaces it (the running agent shows
// the new key), and with the agent stopped records the rotation in the
// journal.
func TestLedgerKeyStatusAndRotation(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("RXEDGE_STORE_ID", cliStore)
	keyFile := filepath.Join(dir, notary.KeyFileName)
	func() {
		defer startDaemon(t, localOptions(t, dir))()

		var st status.Status
		if err := json.Unmarshal([]byte(mustCLI(t, "status", "--json", "--data-dir", dir)), &st); err != nil {
			t.Fatal(err)
		}
		k, err := notary.LoadKey(keyFile, cliStore)
		if err != nil {
			t.Fatalf("the agent made no key: %v", err)
		}
		if st.Ledger == nil || st.Ledger.PublicKey != k.VKey || st.Ledger.KeyLostAt != nil || st.Ledger.First != 1 {
			t.Fatalf("status ledger = %+v, want public key %s", st.Ledger, k.VKey)
		}
		if plain := mustCLI(t, "status", "--data-dir", dir); !strings.Contains(plain, "Public key  "+k.VKey) {
			t.Fatalf("plain status without the public key:\n%s", plain)
		}
		out := mustCLI(t, "ledger", "rotate-key", "--data-dir", dir, "--keep-old")
		k2, err := notary.LoadKey(keyFile, cliStore)
		if err != nil || k2.VKey == k.VKey || !strings.Contains(out, cliStore+" "+k2.VKey) || !strings.Contains(out, "running agent") {
			t.Fatalf("rotate-key with the agent running:\n%s\n(key %v)", out, err)
		}
		if kept, _ := filepath.Glob(keyFile + ".old-*"); len(kept) != 1 {
			t.Fatalf("old key files %v, want one kept", kept)
		}
	}()

	// Stopped: the rotation is journalled by the command.
	var r rotation
	if err := json.Unmarshal([]byte(mustCLI(t, "ledger", "rotate-key", "--data-dir", dir, "--json", "--reason-text", "yearly")), &r); err != nil {
		t.Fatal(err)
	}
	if r.Running || !r.Journaled || r.OldKey == "" || r.NewKey == r.OldKey || r.KeptAt != "" {
		t.Fatalf("rotation with the agent stopped: %+v", r)
	}
	if kept, _ := filepath.Glob(keyFile + ".old-*"); len(kept) != 1 {
		t.Fatalf("old key files %v: without --keep-old the old key must be removed", kept)
	}
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: cliStore, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var found bool
	q.Events(time.Time{}, func(e queue.Event) bool {
		found = found || e.Action == queue.ActionLedger && e.Detail["public_key"] == r.NewKey && strings.Contains(e.Reason, "yearly")
		return true
	})
	if !found {
		t.Fatal("the rotation is not in the journal")
	}
}

// TestLostKeyAgentStartsAndWarns: the key file deleted, the agent starts,
// makes a new key, and status shows the loss; movements are accepted.
func TestLostKeyAgentStartsAndWarns(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, notary.KeyFileName)
	// A store that signed before: a key and a checkpoint in its file.
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: cliStore})
	if err != nil {
		t.Fatal(err)
	}
	k, err := notary.CreateKey(keyFile, cliStore)
	if err != nil {
		t.Fatal(err)
	}
	n := notary.New(notary.Options{Queue: q, StoreID: cliStore, Settings: notary.Settings{KeyFile: keyFile}})
	p, es := movement.Prepare([]byte(`{"movement_id":"LOST-1","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`), cliStore, time.Now())
	if es != nil {
		t.Fatal(es)
	}
	if _, err := q.Enqueue([]movement.Prepared{p}); err != nil {
		t.Fatal(err)
	}
	if err := n.Tick(t.Context()); err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}

	defer startDaemon(t, localOptions(t, dir))()
	var st status.Status
	if err := json.Unmarshal([]byte(mustCLI(t, "status", "--json", "--data-dir", dir)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Ledger == nil || st.Ledger.KeyLostAt == nil || st.Ledger.PublicKey == "" || st.Ledger.PublicKey == k.VKey {
		t.Fatalf("status after a lost key: %+v", st.Ledger)
	}
	if plain := mustCLI(t, "status", "--data-dir", dir); !strings.Contains(plain, "signing key was lost") {
		t.Fatalf("plain status does not warn of the lost key:\n%s", plain)
	}
	f := filepath.Join(t.TempDir(), "m.jsonl")
	os.WriteFile(f, []byte(`{"movement_id":"LOST-2","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`+"\n"), 0o600)
	mustCLI(t, "enqueue", "--data-dir", dir, "-f", f)
}

// startDaemon runs an agent until the returned function stops it.
func startDaemon(t *testing.T, opts settings.Options) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, opts, nil, daemon.Hooks{Ready: func(string) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("daemon.Run: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("the agent did not become ready within 10s")
	}
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon.Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the agent did not stop within 15s")
		}
	}
}
