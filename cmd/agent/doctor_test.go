package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/doctor"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/testkit/natstest"
)

var productionTemplate = filepath.Join("..", "..", "configs", "nats", "production.conf.template")

// adminConnect are the production template's administrator credentials.
var adminConnect = []nats.Option{nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix(central.InboxPrefix("admin"))}

// doctorStore writes an installed store's files for S0001 against url with
// password and returns the config's path and the admin password file.
func doctorStore(t *testing.T, url, password string) (config, adminPW string) {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	os.Mkdir(data, 0o750)
	q, err := queue.Open(queue.Options{Path: filepath.Join(data, "agent.db"), StoreID: "S0001"})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	tok := filepath.Join(dir, "ingest.token")
	os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef"), 0o640)
	config = filepath.Join(dir, "agent.yaml")
	os.WriteFile(config, []byte("store_id: S0001\ndata_dir: "+installer.YAMLQuote(data)+"\ningest:\n  token_file: "+installer.YAMLQuote(tok)+
		"\nnats:\n  servers: ["+installer.YAMLQuote(url)+"]\n  user: S0001\n  password: "+installer.YAMLQuote(password)+"\n"), 0o640)
	adminPW = filepath.Join(dir, "admin.pw")
	os.WriteFile(adminPW, []byte("CHANGE-ME-admin\n"), 0o600)
	return config, adminPW
}

// TestDoctor runs `agent doctor --json` against a real nats-server with
// the production permission template, as central can be found in the
// field.
func TestDoctor(t *testing.T) {
	denied := filepath.Join(t.TempDir(), "denied.conf")
	b, err := os.ReadFile(productionTemplate)
	if err != nil {
		t.Fatal(err)
	}
	// S0001 may publish only S0009's movements (its user's permission;
	// its account still imports its own).
	const own = "# its movements, one subject per key\n              \"rx.mv.S0001.>\""
	if !strings.Contains(string(b), own) {
		t.Fatalf("the template no longer grants S0001 its movements as %q", own)
	}
	os.WriteFile(denied, []byte(strings.Replace(string(b), own, strings.Replace(own, "S0001", "S0009", 1), 1)), 0o600)

	wrongSettings := func(t *testing.T, url string) {
		nc := natstest.Connect(t, url, adminConnect...)
		cfg := central.StreamConfig(central.StreamOptions{})
		cfg.DenyPurge, cfg.MaxMsgsPerSubject = false, 5
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := natstest.JetStream(t, nc).CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		conf      string
		provision bool
		setup     func(t *testing.T, url string)
		password  string
		failed    []string // checks that fail; none means ready
		fix       string   // in the first failed check's fix
	}{
		{name: "healthy", conf: productionTemplate, provision: true, password: "CHANGE-ME-S0001"},
		{name: "wrong password", conf: productionTemplate, provision: true, password: "wrong",
			failed: []string{doctor.CheckAuth}, fix: "credentials"},
		{name: "missing stream", conf: productionTemplate, password: "CHANGE-ME-S0001",
			failed: []string{doctor.CheckStream, doctor.CheckPublishOwn}, fix: "run `rxedge-hq provision"},
		{name: "stream with wrong settings", conf: productionTemplate, setup: wrongSettings, password: "CHANGE-ME-S0001",
			failed: []string{doctor.CheckStream}, fix: "run `rxedge-hq provision"},
		{name: "store denied its own subjects", conf: denied, provision: true, password: "CHANGE-ME-S0001",
			failed: []string{doctor.CheckPublishOwn}, fix: "allow publish on rx.mv.<store>.>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := natstest.StartHub(t, natstest.WithConfigFile(tc.conf, adminConnect...), func(o *hub.Options) {
				if !tc.provision {
					o.Provision = nil
				}
			})
			if tc.setup != nil {
				tc.setup(t, h.URL())
			}
			config, adminPW := doctorStore(t, h.URL(), tc.password)
			args := []string{"doctor", "--json", "--config", config, "--admin-user", "admin", "--admin-password-file", adminPW, "--timeout", "2s"}
			stdout, stderr, code := runCLI(t, args...)
			var r doctor.Report
			if err := json.Unmarshal([]byte(stdout), &r); err != nil {
				t.Fatalf("doctor --json: %v\n%s%s", err, stdout, stderr)
			}
			var failed []string
			fix := ""
			for _, c := range r.Checks {
				if !c.OK {
					failed = append(failed, c.Name)
					if fix == "" {
						fix = c.Fix
					}
					if c.Fix == "" {
						t.Errorf("failed check %q has no fix", c.Name)
					}
				}
			}
			wantCode := cli.ExitOK
			if len(tc.failed) > 0 {
				wantCode = cli.ExitAttention
			}
			if code != wantCode || strings.Join(failed, ",") != strings.Join(tc.failed, ",") || !strings.Contains(fix, tc.fix) || r.Ready != (len(tc.failed) == 0) {
				t.Errorf("exit %d, failed %v, first fix %q; want exit %d, failed %v, fix naming %q\n%s%s", code, failed, fix, wantCode, tc.failed, tc.fix, stdout, stderr)
			}
		})
	}
}

// TestDoctorDurabilityMoved: the durability check's flags are refused
// (exit 2) with where the check went, and the store's report has no such
// check: central's fsync and replicas are head office's to check.
func TestDoctorDurabilityMoved(t *testing.T) {
	for _, args := range [][]string{
		{"--system-user", "sys", "--system-password-file", "sys.pw"},
		{"--monitor-url", "http://central-1:8222"},
	} {
		_, stderr, code := runCLI(t, append([]string{"doctor", "--dev"}, args...)...)
		if code != cli.ExitUsage || !strings.Contains(stderr, "moved") || !strings.Contains(stderr, "rxedge-hq durability") {
			t.Errorf("doctor %v: exit %d\n%s", args, code, stderr)
		}
	}
}

// TestDoctorWithoutAConfig: a config doctor cannot read is a failed check,
// exit 3 like every other "not ready".
func TestDoctorWithoutAConfig(t *testing.T) {
	stdout, stderr, code := runCLI(t, "doctor", "--config", filepath.Join(t.TempDir(), "agent.yaml"))
	if code != cli.ExitAttention || !strings.Contains(stdout, "FAIL config") || !strings.Contains(stdout, "fix: ") {
		t.Errorf("exit %d, want %d with a failed config check and its fix:\n%s%s", code, cli.ExitAttention, stdout, stderr)
	}
}

// TestDoctorPartitionWithoutMapping: a partitioned central whose server
// configuration lacks the store's mapping onto its partition. Doctor
// names the missing mapping and the command that restores it, and never
// advises a provision without --partitions (which would create
// RX_MOVEMENTS beside the partitions and split the store's record); with
// and without the administrator's credentials.
func TestDoctorPartitionWithoutMapping(t *testing.T) {
	const n = 4
	var b bytes.Buffer
	if err := provision.CentralConfig(&b, []string{"S0001", "S0002"}, n); err != nil {
		t.Fatal(err)
	}
	var kept []string
	dropped := 0
	for _, line := range strings.Split(b.String(), "\n") {
		// S0001's imports of its partition's subjects.
		if strings.Contains(line, "account: RX") && strings.Contains(line, "rx.mvp.") && strings.Contains(line, ".S0001.") && strings.Contains(line, "to:") {
			dropped++
			continue
		}
		kept = append(kept, line)
	}
	if dropped != 2 {
		t.Fatalf("dropped %d mapping lines of S0001, want 2", dropped)
	}
	conf := filepath.Join(t.TempDir(), "central.conf")
	os.WriteFile(conf, []byte(strings.Join(kept, "\n")), 0o600)
	h := natstest.StartHub(t, natstest.WithConfigFile(conf, adminConnect...), func(o *hub.Options) {
		o.Stream = central.StreamOptions{Partitions: n}
	})
	config, adminPW := doctorStore(t, h.URL(), "CHANGE-ME-S0001")
	for _, admin := range []bool{true, false} {
		args := []string{"doctor", "--json", "--config", config, "--timeout", "2s"}
		if admin {
			args = append(args, "--admin-user", "admin", "--admin-password-file", adminPW)
		}
		stdout, stderr, code := runCLI(t, args...)
		var r doctor.Report
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("doctor --json: %v\n%s%s", err, stdout, stderr)
		}
		var c doctor.Check
		for _, x := range r.Checks {
			if x.Name == doctor.CheckStream {
				c = x
			}
		}
		if code != cli.ExitAttention || c.OK {
			t.Fatalf("admin %v: exit %d, stream check %+v", admin, code, c)
		}
		text := c.Detail + " " + c.Fix
		for _, want := range []string{"mapping", "rx.mv.S0001.>", "`rxedge-hq central-config --roster FILE --partitions"} {
			if !strings.Contains(text, want) {
				t.Errorf("admin %v: the diagnosis lacks %q: %s", admin, want, text)
			}
		}
		if admin && !strings.Contains(text, fmt.Sprintf("--partitions %d", n)) {
			t.Errorf("with the administrator, the diagnosis does not name central's %d partitions: %s", n, text)
		}
		// Every provision it mentions carries --partitions, or warns against leaving it out.
		for _, all := range []doctor.Check{c} {
			for _, seg := range strings.Split(all.Fix, "`") {
				if strings.Contains(seg, " provision ") && !strings.Contains(seg, "--partitions") && admin {
					t.Errorf("advises %q on a partitioned central", seg)
				}
			}
		}
	}
}

// TestDoctorDev: `doctor --dev` checks the trial agent of `run --dev`
// (data under ./rxedge-dev, central the embedded hub) with no config file
// and no token, and finds it ready.
func TestDoctorDev(t *testing.T) {
	h := natstest.StartHub(t)
	t.Chdir(t.TempDir())
	c, err := settings.DevConfig(h.Addr())
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(queue.Options{Path: settings.DataFile(c.DataDir), StoreID: settings.DevStoreID})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	stdout, stderr, code := runCLI(t, "doctor", "--dev", "--dev-hub", h.Addr(), "--json", "--timeout", "2s")
	var r doctor.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("doctor --dev --json: %v\n%s%s", err, stdout, stderr)
	}
	if code != cli.ExitOK || !r.Ready {
		t.Errorf("doctor --dev: exit %d, ready %v:\n%s%s", code, r.Ready, stdout, stderr)
	}
	// The plain report: a skipped check with nothing to fix has no fix line.
	stdout, _, _ = runCLI(t, "doctor", "--dev", "--dev-hub", h.Addr(), "--timeout", "2s")
	for _, line := range strings.Split(stdout, "\n") {
		if strings.TrimSpace(line) == "fix:" {
			t.Errorf("doctor --dev prints an empty fix line:\n%s", stdout)
			break
		}
	}
}
