package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/doctor"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
)

// signedDataDir makes the data directory of a stopped agent that signed a
// checkpoint with the key in keyFile, and returns that key.
func signedDataDir(t *testing.T, dir, keyFile string) *notary.Key {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: cliStore})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	k, err := notary.CreateKey(keyFile, cliStore)
	if err != nil {
		t.Fatal(err)
	}
	p, es := movement.Prepare([]byte(`{"movement_id":"KEY-1","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`), cliStore, time.Now())
	if es != nil {
		t.Fatal(es)
	}
	if _, err := q.Enqueue([]movement.Prepared{p}); err != nil {
		t.Fatal(err)
	}
	if err := notary.New(notary.Options{Queue: q, StoreID: cliStore, Settings: notary.Settings{KeyFile: keyFile}}).Tick(t.Context()); err != nil {
		t.Fatal(err)
	}
	return k
}

func stoppedStatus(t *testing.T, args ...string) (status.Status, string) {
	t.Helper()
	var st status.Status
	out := mustCLI(t, append([]string{"status", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if st.Agent.Running {
		t.Fatal("the agent runs")
	}
	if st.Ledger == nil {
		t.Fatalf("no ledger in the stopped status:\n%s", out)
	}
	return st, mustCLI(t, append([]string{"status"}, args...)...)
}

// TestStoppedStatusShowsThePublicKey: `agent status` of a stopped agent
// reads the public key from the key file (the configured one, when the
// configuration is that agent's) into ledger.public_key, in JSON and the
// plain view, with the key that signed the newest checkpoint; never the
// private key.
func TestStoppedStatusShowsThePublicKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, notary.KeyFileName)
	k := signedDataDir(t, dir, keyFile)
	priv, _ := os.ReadFile(keyFile)
	skey := strings.SplitN(string(priv), "\n", 2)[0]

	st, plain := stoppedStatus(t, "--data-dir", dir)
	if st.Ledger.PublicKey != k.VKey || st.Ledger.Error != "" || st.Ledger.LastCheckpointKey != ledger.KeyID(k.VKey) {
		t.Fatalf("stopped ledger %+v, want public key %s", st.Ledger, k.VKey)
	}
	if !strings.Contains(plain, "Public key  "+k.VKey) || strings.Contains(plain, "Key changed") {
		t.Fatalf("plain stopped status:\n%s", plain)
	}
	raw := mustCLI(t, "status", "--json", "--data-dir", dir)
	if strings.Contains(raw, skey) || strings.Contains(plain, skey) || strings.Contains(raw, "PRIVATE") {
		t.Fatal("the status shows the private key")
	}

	// A key_file elsewhere, named by the agent's configuration.
	other := filepath.Join(t.TempDir(), "store.key")
	if err := os.Rename(keyFile, other); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(cfg, []byte("store_id: "+cliStore+"\ndata_dir: "+dir+"\nledger:\n  key_file: "+other+"\n"), 0o600)
	if st, _ := stoppedStatus(t, "--config", cfg); st.Ledger.PublicKey != k.VKey {
		t.Fatalf("with ledger.key_file: %+v", st.Ledger)
	}
	if st, _ := stoppedStatus(t, "--config", cfg, "--data-dir", dir); st.Ledger.PublicKey != k.VKey {
		t.Fatalf("with ledger.key_file and --data-dir: %+v", st.Ledger)
	}

	// Rotated while stopped: the newest checkpoint's key is the old one,
	// and the view says the roster needs the new line.
	if err := os.Rename(other, keyFile); err != nil {
		t.Fatal(err)
	}
	r, err := notary.RotateKey(keyFile, cliStore, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st, plain = stoppedStatus(t, "--data-dir", dir)
	if st.Ledger.PublicKey != r.New || st.Ledger.LastCheckpointKey != ledger.KeyID(k.VKey) {
		t.Fatalf("after rotation %+v", st.Ledger)
	}
	if !strings.Contains(plain, "Key changed") || !strings.Contains(plain, cliStore+" "+r.New) {
		t.Fatalf("plain status after rotation does not give the roster line:\n%s", plain)
	}
}

// TestStoppedStatusWithABadKeyFile: a key file that is missing, cannot be
// parsed or is another store's is said in ledger.error, with no public
// key; the status itself still answers (exit 0).
func TestStoppedStatusWithABadKeyFile(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, notary.KeyFileName)
	signedDataDir(t, dir, keyFile)
	os.Remove(keyFile)
	for _, c := range []struct {
		name, want string
		make       func()
	}{
		{"missing after signing", "is missing: restore it", func() {}},
		{"garbage", "not a key file", func() { os.WriteFile(keyFile, []byte("garbage"), 0o600) }},
		{"directory", "is a directory", func() { os.Mkdir(keyFile, 0o700) }},
		{"another store's", "another store's", func() { notary.CreateKey(keyFile, "S9999") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.RemoveAll(keyFile)
			c.make()
			st, plain := stoppedStatus(t, "--data-dir", dir)
			if st.Ledger.PublicKey != "" || !strings.Contains(st.Ledger.Error, c.want) {
				t.Fatalf("ledger %+v, want an error with %q", st.Ledger, c.want)
			}
			if !strings.Contains(plain, "Ledger error") || !strings.Contains(plain, c.want) {
				t.Fatalf("plain:\n%s", plain)
			}
		})
	}

	// A data file that never signed: the key is made at the first start.
	fresh := t.TempDir()
	q, err := queue.Open(queue.Options{Path: settings.DataFile(fresh), StoreID: cliStore})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	if st, _ := stoppedStatus(t, "--data-dir", fresh); st.Ledger.PublicKey != "" || !strings.Contains(st.Ledger.Error, "makes one at its start") {
		t.Fatalf("fresh data file: %+v", st.Ledger)
	}
}

// TestDoctorChecksTheSigningKey: `agent doctor` (plain and --json) checks
// the signing key of a stopped store: its key file, its permissions and
// that it signed the newest checkpoint; after a rotation it gives the
// roster line; a key file open to others fails the report.
func TestDoctorChecksTheSigningKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, notary.KeyFileName)
	k := signedDataDir(t, dir, keyFile)
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(cfg, []byte("store_id: "+cliStore+"\ndata_dir: "+dir+"\ningest:\n  listen: \"off\"\n"), 0o600)

	report := func() (map[string]doctor.Check, string) {
		out, errs, code := runCLI(t, "doctor", "--json", "--config", cfg)
		if code != cli.ExitAttention { // no central configured: never ready
			t.Fatalf("doctor exit %d:\n%s%s", code, out, errs)
		}
		var r doctor.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		got := map[string]doctor.Check{}
		for _, c := range r.Checks {
			got[c.Name] = c
		}
		plain, _, _ := runCLI(t, "doctor", "--config", cfg)
		return got, plain
	}
	got, plain := report()
	if c := got[doctor.CheckLedgerKey]; !c.OK || !strings.Contains(c.Detail, k.VKey) {
		t.Fatalf("signing key check %+v", c)
	}
	if c := got[doctor.CheckLedgerKeyPrivate]; !c.OK && runtime.GOOS != "windows" { // a temporary directory's DACL is the runner's
		t.Fatalf("private check %+v", c)
	}
	if c := got[doctor.CheckLedgerKeyMatches]; !c.OK {
		t.Fatalf("match check %+v", c)
	}
	if !strings.Contains(plain, "ok   signing key ") || !strings.Contains(plain, "ok   signing key of newest checkpoint") {
		t.Fatalf("plain report:\n%s", plain)
	}

	r, err := notary.RotateKey(keyFile, cliStore, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, plain = report()
	if c := got[doctor.CheckLedgerKeyMatches]; !c.Warning || !strings.Contains(c.Fix, cliStore+" "+r.New) {
		t.Fatalf("match check after rotation %+v", c)
	}
	for _, w := range []string{"warn signing key of newest checkpoint", "fix: the roster needs the new key", cliStore + " " + r.New} {
		if !strings.Contains(plain, w) {
			t.Errorf("plain report lacks %q:\n%s", w, plain)
		}
	}
	if runtime.GOOS == "windows" {
		return // the DACL cases: doctor's TestLedgerKeyPrivateDACL
	}
	os.Chmod(keyFile, 0o644)
	got, plain = report()
	if c := got[doctor.CheckLedgerKeyPrivate]; c.OK || c.Warning || !strings.Contains(c.Fix, "chmod 600 "+keyFile) {
		t.Fatalf("private check of a 0644 key %+v", c)
	}
	for _, w := range []string{"FAIL signing key private", "fix: chmod 600 " + keyFile} {
		if !strings.Contains(plain, w) {
			t.Errorf("plain report lacks %q:\n%s", w, plain)
		}
	}
}
