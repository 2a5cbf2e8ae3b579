package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestProvision runs `hq provision` as the production template's
// administrator against a server without the stream: with --user admin
// its inbox prefix defaults to _INBOX_admin, the only one the server lets
// it read, and the stream it creates is central's.
func TestProvision(t *testing.T) {
	srv := natstest.StartHub(t,
		natstest.WithConfigFile(filepath.Join("..", "..", "configs", "nats", "production.conf.template")),
		natstest.WithSkipProvision())
	admin := []string{"provision", "--server", srv.URL(), "--user", "admin", "--password", "CHANGE-ME-admin"}

	tests := []struct {
		name  string
		extra []string
		code  int
		want  string
	}{
		{name: "create", want: "created stream RX_MOVEMENTS\ncreated stream RX_ARCHIVE\ncreated stream KV_RX_FLEET\ncreated stream RX_WITNESS\n"},
		{name: "again: nothing to do", want: "central's streams are up to date\n"},
		{name: "shorter duplicate window", extra: []string{"--duplicate-window", "2m"},
			want: "RX_MOVEMENTS: duplicate_window: 10m0s -> 2m0s\nRX_ARCHIVE: duplicate_window: 10m0s -> 2m0s\nRX_WITNESS: duplicate_window: 10m0s -> 2m0s\n"},
		{name: "bad replicas", extra: []string{"--replicas", "0"}, code: cli.ExitUsage},
		{name: "no partitions", extra: []string{"--partitions", "0"}, code: cli.ExitUsage},
		{name: "too many partitions", extra: []string{"--partitions", "65"}, code: cli.ExitUsage},
		{name: "retention under two years", extra: []string{"--retention", "8760h"}, code: cli.ExitUsage},
		{name: "horizon not under the retention", extra: []string{"--max-age", "20000h"}, code: cli.ExitUsage},
		{name: "a test central's short retention, when told", extra: []string{"--duplicate-window", "2m", "--max-age", "24h", "--retention", "48h", "--allow-short-retention"},
			want: "RX_ARCHIVE: max_age: 18264h0m0s -> 48h0m0s\nRX_MOVEMENTS: max_age: 840h0m0s -> 24h0m0s\nRX_WITNESS: max_age: 18264h0m0s -> 48h0m0s\n"},
		{name: "back to two years and a month", extra: []string{"--duplicate-window", "2m"},
			want: "RX_MOVEMENTS: max_age: 24h0m0s -> 840h0m0s\nRX_ARCHIVE: max_age: 48h0m0s -> 18264h0m0s\nRX_WITNESS: max_age: 48h0m0s -> 18264h0m0s\n"},
	}
	const notChecked = "durability not checked: give --system-user and --system-password-file, or --monitor-url, to check fsync and replicas\n"
	for _, tc := range tests {
		stdout, stderr, code := runCLI(t, append(admin, tc.extra...)...)
		if tc.code == 0 {
			tc.want += notChecked
		}
		if code != tc.code || stdout != tc.want {
			t.Errorf("%s: exit %d, stdout %q; want exit %d, stdout %q\nstderr: %s", tc.name, code, stdout, tc.code, tc.want, stderr)
		}
	}

	// With the system account's user, provision reports central's
	// durability: this server fsyncs every write (ok) and, being alone,
	// keeps one replica (a warning, not a failure).
	pw := filepath.Join(t.TempDir(), "sys.pw")
	if err := os.WriteFile(pw, []byte("CHANGE-ME-sys\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, append(admin, "--duplicate-window", "2m", "--system-user", "sys", "--system-password-file", pw)...)
	if code != 0 || !strings.Contains(stdout, "central's streams are up to date\ncentral durability") ||
		!strings.Contains(stdout, "sync_interval") || !strings.Contains(stdout, "warn") {
		t.Errorf("with the system user: exit %d, stdout %q, stderr %q; want the durability report, exit 0", code, stdout, stderr)
	}
	if _, _, code := runCLI(t, append(admin, "--system-user", "sys", "--system-password-file", filepath.Join(t.TempDir(), "none"))...); code != cli.ExitUsage {
		t.Errorf("system user without its password file: exit %d, want %d", code, cli.ExitUsage)
	}

	nc := natstest.Connect(t, srv.URL(), nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix(central.InboxPrefix("admin")))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := natstest.JetStream(t, nc).Stream(ctx, central.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	want := central.StreamConfig(central.StreamOptions{DuplicateWindow: 2 * time.Minute})
	got := s.CachedInfo().Config
	if got.Duplicates != want.Duplicates || strings.Join(got.Subjects, ",") != strings.Join(want.Subjects, ",") ||
		got.MaxMsgsPerSubject != want.MaxMsgsPerSubject || !got.DenyDelete || !got.AllowDirect || !got.AllowAtomicPublish {
		t.Errorf("stream config on the server = %+v, want central's %+v", got, want)
	}
}
