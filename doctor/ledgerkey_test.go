package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/status/builder"
)

const keyStore = "S0042"

// keyStoreDir is a data directory whose file holds a checkpoint signed
// with a key made in the key file's default place, and the options
// doctor gets for it; status reads the file as a stopped agent's status
// does.
func keyStoreDir(t *testing.T, sign bool) (Options, string, *notary.Key) {
	t.Helper()
	dir := t.TempDir()
	privateDir(t, dir)
	keyFile := filepath.Join(dir, notary.KeyFileName)
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: keyStore})
	if err != nil {
		t.Fatal(err)
	}
	k, err := notary.CreateKey(keyFile, keyStore)
	if err != nil {
		t.Fatal(err)
	}
	if sign {
		p, es := movement.Prepare([]byte(`{"movement_id":"DOC-1","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`), keyStore, time.Now())
		if es != nil {
			t.Fatal(es)
		}
		if _, err := q.Enqueue([]movement.Prepared{p}); err != nil {
			t.Fatal(err)
		}
		if err := notary.New(notary.Options{Queue: q, StoreID: keyStore, Settings: notary.Settings{KeyFile: keyFile}}).Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	o := Options{ConfigPath: "/etc/rxedge/agent.yaml", Config: settings.Config{StoreID: keyStore, DataDir: dir}, Command: "rxedge-agent"}
	o.defaults()
	return o, keyFile, k
}

// keyChecks runs the key checks with the status of the stopped agent.
func keyChecks(t *testing.T, o Options) map[string]Check {
	t.Helper()
	var st *status.Status
	var stErr error = fmt.Errorf("no agent data file")
	if _, err := os.Stat(settings.DataFile(o.Config.DataDir)); err == nil {
		q, err := queue.Open(queue.Options{Path: settings.DataFile(o.Config.DataDir), ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		st, stErr = builder.New(builder.Sources{Queue: q}).Status()
		q.Close()
	}
	got := map[string]Check{}
	for _, c := range ledgerKeyChecks(o, st, stErr) {
		got[c.Name] = c
	}
	if len(got) != 3 {
		t.Fatalf("key checks %+v", got)
	}
	return got
}

func want(t *testing.T, c Check, state, text string) {
	t.Helper()
	var is string
	switch {
	case c.OK:
		is = "ok"
	case c.Skipped:
		is = "skip"
	case c.Warning:
		is = "warn"
	default:
		is = "fail"
	}
	if is != state || !strings.Contains(c.Detail+" fix: "+c.Fix, text) {
		t.Errorf("%s: %s %q fix %q; want %s with %q", c.Name, is, c.Detail, c.Fix, state, text)
	}
	if !c.OK && c.Fix == "" {
		t.Errorf("%s: no fix", c.Name)
	}
	if strings.Contains(c.Detail+c.Fix, "PRIVATE") {
		t.Errorf("%s shows the private key", c.Name)
	}
}

func TestLedgerKeyChecks(t *testing.T) {
	t.Run("good", func(t *testing.T) {
		o, _, k := keyStoreDir(t, true)
		got := keyChecks(t, o)
		want(t, got[CheckLedgerKey], "ok", k.VKey)
		want(t, got[CheckLedgerKeyPrivate], "ok", "readable by ")
		want(t, got[CheckLedgerKeyMatches], "ok", "signed with this key")
	})
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		t.Run(fmt.Sprintf("mode %04o", mode), func(t *testing.T) {
			if runtime.GOOS == "windows" {
				t.Skip("unix modes; TestLedgerKeyPrivateDACL sets Windows DACLs")
			}
			o, keyFile, _ := keyStoreDir(t, true)
			os.Chmod(keyFile, mode)
			got := keyChecks(t, o)
			want(t, got[CheckLedgerKey], "ok", "public key")
			want(t, got[CheckLedgerKeyPrivate], "fail", "chmod 600 "+keyFile)
		})
	}
	t.Run("another store's key", func(t *testing.T) {
		o, keyFile, _ := keyStoreDir(t, true)
		os.Remove(keyFile)
		notary.CreateKey(keyFile, "S9999")
		got := keyChecks(t, o)
		want(t, got[CheckLedgerKey], "fail", "another store's")
		want(t, got[CheckLedgerKey], "fail", "ledger rotate-key")
		want(t, got[CheckLedgerKeyMatches], "skip", "no key to compare")
	})
	t.Run("garbage", func(t *testing.T) {
		o, keyFile, _ := keyStoreDir(t, true)
		os.WriteFile(keyFile, []byte("PRIVATE+KEY+garbage\x00\xff\n"), 0o600)
		got := keyChecks(t, o)
		want(t, got[CheckLedgerKey], "fail", "move "+keyFile+" away")
		want(t, got[CheckLedgerKeyPrivate], "ok", "readable by ")
	})
	t.Run("symlink", func(t *testing.T) {
		o, keyFile, _ := keyStoreDir(t, true)
		elsewhere := filepath.Join(t.TempDir(), "k")
		os.Rename(keyFile, elsewhere)
		if err := os.Symlink(elsewhere, keyFile); err != nil {
			t.Skip(err)
		}
		if _, err := os.Lstat(keyFile); err != nil {
			t.Skipf("the symbolic link made is not there (Wine makes none): %v", err)
		}
		got := keyChecks(t, o)
		want(t, got[CheckLedgerKey], "fail", "symbolic link")
		want(t, got[CheckLedgerKeyPrivate], "skip", "not a regular file")
	})
	t.Run("missing after signing", func(t *testing.T) {
		o, keyFile, k := keyStoreDir(t, true)
		os.Remove(keyFile)
		got := keyChecks(t, o)
		want(t, got[CheckLedgerKey], "fail", "the key is lost")
		want(t, got[CheckLedgerKey], "fail", strings.SplitN(k.VKey, "+", 3)[1]) // names the lost key's hash
		want(t, got[CheckLedgerKey], "fail", "restore "+keyFile)
		want(t, got[CheckLedgerKeyMatches], "skip", "no key to compare")
	})
	t.Run("missing, new data file", func(t *testing.T) {
		o, keyFile, _ := keyStoreDir(t, false)
		os.Remove(keyFile)
		got := keyChecks(t, o)
		want(t, got[CheckLedgerKey], "ok", "makes it at its first start")
		want(t, got[CheckLedgerKeyPrivate], "ok", "no key file yet")
		want(t, got[CheckLedgerKeyMatches], "ok", "nothing signed yet")
		os.Remove(settings.DataFile(o.Config.DataDir))
		got = keyChecks(t, o)
		want(t, got[CheckLedgerKey], "ok", "makes it at its first start")
		want(t, got[CheckLedgerKeyMatches], "ok", "nothing signed yet")
	})
	t.Run("never signed", func(t *testing.T) {
		o, _, _ := keyStoreDir(t, false)
		want(t, keyChecks(t, o)[CheckLedgerKeyMatches], "ok", "no checkpoint signed yet")
	})
	t.Run("rotated since the newest checkpoint", func(t *testing.T) {
		o, keyFile, _ := keyStoreDir(t, true)
		r, err := notary.RotateKey(keyFile, keyStore, false, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got := keyChecks(t, o)
		want(t, got[CheckLedgerKey], "ok", r.New)
		want(t, got[CheckLedgerKeyMatches], "warn", "the roster needs the new key")
		want(t, got[CheckLedgerKeyMatches], "warn", keyStore+" "+r.New)
	})
	t.Run("the service may not read it", func(t *testing.T) {
		if runtime.GOOS == "windows" || os.Getuid() != 0 {
			t.Skip("changes owners: run as root (CI does)")
		}
		o, keyFile, _ := keyStoreDir(t, true)
		// The service (nobody here) owns the data directory; the key is
		// root's.
		os.Chown(o.Config.DataDir, 65534, 65534)
		got := keyChecks(t, o)
		want(t, got[CheckLedgerKeyPrivate], "fail", "may not read "+keyFile)
		want(t, got[CheckLedgerKeyPrivate], "fail", "chown ")
		os.Chown(keyFile, 65534, 65534)
		want(t, keyChecks(t, o)[CheckLedgerKeyPrivate], "ok", "readable by ")
	})
	t.Run("ledger.key_file elsewhere", func(t *testing.T) {
		o, keyFile, k := keyStoreDir(t, true)
		other := filepath.Join(o.Config.DataDir, "keys", "store.key")
		os.Mkdir(filepath.Dir(other), 0o700)
		os.Rename(keyFile, other)
		o.Config.Ledger.KeyFile = other
		got := keyChecks(t, o)
		want(t, got[CheckLedgerKey], "ok", other+": store "+keyStore+"'s key, public key "+k.VKey)
		want(t, got[CheckLedgerKeyMatches], "ok", "signed with this key")
	})
}
