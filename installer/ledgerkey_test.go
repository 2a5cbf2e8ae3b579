package installer

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/notary"
)

// TestInstallWritesLedgerKey: install makes the store's signing key in
// the data directory for the config's store_id, readable by the
// service's account only, prints the roster line, and keeps the key on a
// second install.
func TestInstallWritesLedgerKey(t *testing.T) {
	p, root := tempPlan(t)
	p.LedgerKey.Path = filepath.Join(root, p.LedgerKey.Path)
	p.Config.Content = append([]byte("store_id: S0042\n"), p.Config.Content...)
	h := &fakeHost{}
	var out bytes.Buffer
	if err := install(context.Background(), p, &out, h); err != nil {
		t.Fatalf("install: %v\n%s", err, out.String())
	}
	k, err := notary.LoadKey(p.LedgerKey.Path, "S0042")
	if err != nil {
		t.Fatal(err)
	}
	if pm := h.perms[p.LedgerKey.Path]; pm.Mode != 0o600 || pm.Owner != "rxedge" || pm.Group != "rxedge" {
		t.Errorf("key perm: got %+v, want 0600 rxedge:rxedge", pm)
	}
	if !strings.Contains(out.String(), "wrote ledger signing key") || !strings.Contains(out.String(), "S0042 "+k.VKey) {
		t.Errorf("output lacks the key and its roster line:\n%s", out.String())
	}
	out.Reset()
	if err := install(context.Background(), p, &out, &fakeHost{}); err != nil {
		t.Fatal(err)
	}
	if again, err := notary.LoadKey(p.LedgerKey.Path, "S0042"); err != nil || again.VKey != k.VKey {
		t.Errorf("second install replaced the key: %v", err)
	}
	if !strings.Contains(out.String(), "kept existing ledger signing key") {
		t.Errorf("second output:\n%s", out.String())
	}
}

// TestInstallWithoutStoreIDLeavesTheKeyToTheAgent: with no store_id yet
// install writes no key and says the agent makes it.
func TestInstallWithoutStoreIDLeavesTheKeyToTheAgent(t *testing.T) {
	p, root := tempPlan(t)
	p.LedgerKey.Path = filepath.Join(root, p.LedgerKey.Path)
	var out bytes.Buffer
	if err := install(context.Background(), p, &out, &fakeHost{}); err != nil {
		t.Fatal(err)
	}
	if _, err := notary.LoadKey(p.LedgerKey.Path, "S0042"); err == nil {
		t.Error("a key was written without a store id")
	}
	if !strings.Contains(out.String(), "makes its ledger signing key at its first start") {
		t.Errorf("output:\n%s", out.String())
	}
}
