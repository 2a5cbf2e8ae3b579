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
		{name: "retention neither 2y nor 6y", extra: []string{"--retention", "3y"}, code: cli.ExitUsage},
		{name: "horizon not under the retention", extra: []string{"--max-age", "20000h"}, code: cli.ExitUsage},
		{name: "a test central's short retention, when told", extra: []string{"--duplicate-window", "2m", "--max-age", "24h", "--retention", "48h", "--allow-short-retention", "--lower-retention"},
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

// TestProvisionSixYears provisions central with --retention 6y on a real
// nats-server: every archive of two partitions and the witness stream
// keep 2,223 days; provisioning again with 2y keeps them and says so; a
// retention other than 2y or 6y is a usage error naming both; and
// --lower-retention lowers them.
func TestProvisionSixYears(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	provision := []string{"provision", "--server", srv.URL(), "--partitions", "2"}
	names := []string{central.ArchiveStream(0, 2), central.ArchiveStream(1, 2), central.WitnessStreamName}
	streamsAt := func(want time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range names {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("stream %s: %v", name, err)
			}
			if got := s.CachedInfo().Config.MaxAge; got != want {
				t.Errorf("%s: max_age %s (%d days), want %d days", name, got, got/(24*time.Hour), want/(24*time.Hour))
			}
		}
	}
	mustCLI(t, append(provision, "--retention", "6y")...)
	if central.SixYearRetention != 2223*24*time.Hour {
		t.Fatalf("SixYearRetention is %s, want 2,223 days", central.SixYearRetention)
	}
	streamsAt(central.SixYearRetention)

	out := mustCLI(t, append(provision, "--retention", "2y")...)
	for _, name := range names {
		if !strings.Contains(out, name+": kept max_age 53352h0m0s") {
			t.Errorf("2y over 6y: %s not said to be kept:\n%s", name, out)
		}
	}
	streamsAt(central.SixYearRetention)

	_, errs, code := runCLI(t, append(provision, "--retention", "5y")...)
	if code != cli.ExitUsage || !strings.Contains(errs, "2y") || !strings.Contains(errs, "6y") {
		t.Errorf("--retention 5y: exit %d, %q; want %d naming 2y and 6y", code, errs, cli.ExitUsage)
	}
	mustCLI(t, append(provision, "--retention", "2y", "--lower-retention")...)
	streamsAt(central.DefaultRetention)
	mustCLI(t, append(provision, "--retention", "6y")...)
	streamsAt(central.SixYearRetention)
}
