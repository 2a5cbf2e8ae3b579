package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/rxedge/agent/configs"
	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
)

// serviceCLI runs the agent command line in-process.
func serviceCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	code = exitCode(err, &errb)
	return out.String(), errb.String(), code
}

// fakeExecutable makes install plan for a binary at the usual place: the
// test binary lives in a temporary directory no service may run from.
func fakeExecutable(t *testing.T) string {
	t.Helper()
	exe := "/usr/local/bin/rxedge-agent"
	if runtime.GOOS == "windows" {
		exe = `C:\Program Files\RxEdge\rxedge-agent.exe`
	}
	saved := executable
	executable = func() (string, error) { return exe, nil }
	t.Cleanup(func() { executable = saved })
	return exe
}

// absentConfig is a config path in a directory that does not exist, where
// install may put a config.
func absentConfig(t *testing.T) string {
	t.Helper()
	dir := fmt.Sprintf("/etc/rxedge-test-%d", os.Getpid())
	if runtime.GOOS == "windows" {
		dir = fmt.Sprintf(`C:\ProgramData\RxEdge-test-%d`, os.Getpid())
	}
	if _, err := os.Stat(dir); err == nil {
		t.Skipf("%s exists", dir)
	}
	return filepath.Join(dir, "agent.yaml")
}

func TestInstallDryRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("checks the systemd unit; the Windows plan is tested in installer")
	}
	exe := fakeExecutable(t)
	cfg := absentConfig(t)
	out, errs, code := serviceCLI(t, "install", "--dry-run", "--store-id", "S0107", "--config", cfg)
	if code != 0 {
		t.Fatalf("install --dry-run: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	unit := textBetween(t, out, "----- begin /etc/systemd/system/rxedge-agent.service -----\n", "----- end /etc/systemd/system/rxedge-agent.service -----\n")
	for _, want := range []string{
		"ExecStart=" + exe + ` "run" "--config" "` + cfg + "\"\n",
		"User=rxedge\n",
		"Restart=on-failure\n",
		"RestartSec=5\n",
		"WorkingDirectory=/var/lib/rxedge\n",
		"ReadWritePaths=/var/lib/rxedge\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	for _, want := range []string{"Dry run: nothing was changed", "config file:  " + cfg, "data dir:     /var/lib/rxedge", "ingest token: " + filepath.Dir(cfg) + "/ingest.token"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}

	// The config install would write is the example with this store's id,
	// and the agent reads it.
	text := textBetween(t, out, "----- begin "+cfg+" -----\n", "----- end "+cfg+" -----\n")
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := settings.LoadFile(path)
	if err != nil {
		t.Fatalf("the planned config does not load: %v\n%s", err, text)
	}
	if c.StoreID != "S0107" || c.DataDir != "/var/lib/rxedge" || c.Ingest.TokenFile != filepath.Dir(cfg)+"/ingest.token" {
		t.Errorf("planned config: store_id %q, data_dir %q, token_file %q", c.StoreID, c.DataDir, c.Ingest.TokenFile)
	}
	if _, err := os.Stat(filepath.Dir(cfg)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dry run created %s: %v", filepath.Dir(cfg), err)
	}
}

func TestInstallUsageErrors(t *testing.T) {
	fakeExecutable(t)
	cfg := absentConfig(t)
	relative := "configs/agent.yaml"
	for _, tc := range []struct {
		name string
		args []string
		flag string // the error must name it
	}{
		{"unknown flag", []string{"install", "--dry-run", "--stor-id", "S0107"}, "--stor-id"},
		{"no store id for a new config", []string{"install", "--dry-run", "--config", cfg}, "--store-id"},
		{"bad store id", []string{"install", "--dry-run", "--config", cfg, "--store-id", "S 0107"}, "--store-id"},
		{"relative config", []string{"install", "--dry-run", "--config", relative, "--store-id", "S0107"}, "--config"},
		{"root user", []string{"install", "--dry-run", "--config", cfg, "--store-id", "S0107", "--user", "root"}, "--user"},
		{"argument", []string{"install", "now"}, "install"},
		{"start flag", []string{"start", "--now"}, "--now"},
		{"stop argument", []string{"stop", "rxedge-agent"}, "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := serviceCLI(t, tc.args...)
			if code != cli.ExitUsage || !strings.Contains(errs, tc.flag) {
				t.Errorf("agent %s: exit %d, stderr %q; want exit %d naming %s (stdout %q)", strings.Join(tc.args, " "), code, errs, cli.ExitUsage, tc.flag, out)
			}
		})
	}
}

func TestInstallConfigDecision(t *testing.T) {
	dir := t.TempDir()
	existing := func(content string) string {
		path := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ours := existing("store_id: S0107\ndata_dir: /var/lib/rxedge\ningest:\n  token_file: /etc/rxedge/ingest.token\n")
	noToken := existing("store_id: S0107\ndata_dir: /var/lib/rxedge\n")
	example := existing(string(configs.AgentExample))
	missing := filepath.Join(dir, "agent.yaml")
	notDir := filepath.Join(ours, "agent.yaml") // a path the OS cannot answer for
	for _, tc := range []struct {
		name, path, storeID string
		wantCode            int    // 0: no error
		wantID              string // store_id of the template
		written             bool
		wantStderr          string
	}{
		{"new config", missing, "S0107", 0, "S0107", true, ""},
		{"new config without id", missing, "", cli.ExitUsage, "", false, ""},
		{"existing kept", ours, "", 0, "S0107", false, "is kept"},
		{"existing same id", ours, "S0107", 0, "S0107", false, "is kept"},
		{"existing other id", ours, "S0999", cli.ExitUsage, "", false, ""},
		{"existing example id", example, "", 0, "S0042", false, "example's store_id"},
		{"unreadable with id", notDir, "S0107", 0, "S0107", false, "cannot read"},
		{"unreadable without id", notDir, "", cli.ExitError, "", false, ""},
		{"existing without a token", noToken, "", cli.ExitError, "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.path == notDir && runtime.GOOS == "windows" {
				t.Skip("windows reports a file used as a directory as not existing")
			}
			var errb bytes.Buffer
			f := installFlags{storeID: tc.storeID}
			nc, err := f.newConfig(tc.path, &cli.Streams{Err: &errb})
			if code := exitCode(err, &errb); code != tc.wantCode {
				t.Fatalf("exit %d (%v), want %d", code, err, tc.wantCode)
			}
			if err != nil {
				want := "--store-id"
				if tc.path == noToken {
					want = "token_file: " + installer.DefaultPaths(runtime.GOOS).TokenFile
				}
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not name %s: %v", want, err)
				}
				return
			}
			if got := storeIDOf(nc.template); got != tc.wantID || nc.written != tc.written {
				t.Errorf("template store_id %q, written %v; want %q, %v", got, nc.written, tc.wantID, tc.written)
			}
			if !strings.Contains(errb.String(), tc.wantStderr) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.wantStderr)
			}
		})
	}
}

func TestWithStoreID(t *testing.T) {
	got, err := withStoreID(configs.AgentExample, "S0107")
	if err != nil {
		t.Fatal(err)
	}
	gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(string(configs.AgentExample), "\n")
	if len(gotLines) != len(wantLines) {
		t.Fatalf("got %d lines, want %d", len(gotLines), len(wantLines))
	}
	changed := 0
	for i := range gotLines {
		if gotLines[i] != wantLines[i] {
			changed++
			if gotLines[i] != "store_id: 'S0107'" {
				t.Errorf("line %d: got %q, want store_id: 'S0107'", i+1, gotLines[i])
			}
		}
	}
	if changed != 1 {
		t.Errorf("%d lines changed, want 1", changed)
	}

	got, err = withStoreID([]byte("# no id\ndata_dir: /var/lib/rxedge\n"), "S0107")
	if err != nil || string(got) != "store_id: 'S0107'\n# no id\ndata_dir: /var/lib/rxedge\n" {
		t.Errorf("without a store_id line: got %q, %v", got, err)
	}
}

func TestExampleConfigEmbedded(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "configs", "agent.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, configs.AgentExample) {
		t.Error("configs.AgentExample differs from configs/agent.example.yaml")
	}
}

// knownService reports whether s is a state `agent status` may show: a
// service state word, or "unknown" with its reason.
func knownService(s *status.Service) bool {
	switch s.State {
	case status.ServiceRunning, status.ServiceStopped, status.ServiceFailed, status.ServiceNotInstalled:
		return s.Detail == ""
	case status.ServiceUnknown:
		return s.Detail != ""
	}
	return false
}

// serviceLine is how the human view shows s.
func serviceLine(s *status.Service) string {
	if s.Detail != "" {
		return s.State + " (" + s.Detail + ")"
	}
	return s.State
}

func TestStatusShowsService(t *testing.T) {
	dir := t.TempDir()
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: "S0107"})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	asServiceDataDir(t)
	want := serviceState()
	if !knownService(want) {
		t.Fatalf("serviceState() = %+v", want)
	}
	t.Logf("service state here: %+v", want)

	out, errs, code := serviceCLI(t, "status", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "\nService     "+serviceLine(want)+"\n") {
		t.Errorf("status does not show the service as %q:\n%s", serviceLine(want), out)
	}

	out, errs, code = serviceCLI(t, "status", "--json", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("status --json: exit %d\n%s%s", code, out, errs)
	}
	var st status.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st.Service == nil || *st.Service != *want {
		t.Errorf("status --json: service %+v, want %+v", st.Service, want)
	}
	if st.StoreID != "S0107" || st.Agent.Running {
		t.Errorf("status --json: store %q, running %v", st.StoreID, st.Agent.Running)
	}
}

func TestOwnsSignals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"run"}, true},
		{[]string{"run", "--config", "/etc/rxedge/agent.yaml"}, true},
		{[]string{"run", "--dev"}, true},
		{[]string{"status", "--watch"}, false},
		{[]string{"stop"}, false},
		{[]string{"enqueue", "-f", "-"}, false},
		{[]string{"no-such-command"}, false},
		{nil, false},
	} {
		if got := ownsSignals(tc.args); got != tc.want {
			t.Errorf("ownsSignals(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func textBetween(t *testing.T, s, begin, end string) string {
	t.Helper()
	_, rest, ok := strings.Cut(s, begin)
	body, _, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("no %q ... %q block in:\n%s", begin, end, s)
	}
	return body
}

// TestInstallWritesCentral: install's config carries --nats and the
// credential, and never the example's placeholder server.
func TestInstallWritesCentral(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "password")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("t0ken-S0107\r\n"), 0o600)
	for _, tc := range []struct {
		name    string
		flags   centralFlags
		servers []string
		check   func(settings.Config) bool
	}{
		{"none", centralFlags{}, nil, func(c settings.Config) bool { return c.NATS.CredsFile == "" && c.NATS.User == "" }},
		{"creds", centralFlags{servers: "nats://a.chain:4222, tls://b.chain:4222", credsFile: "/etc/rxedge/store.creds", caFile: "/etc/rxedge/ca.pem"},
			[]string{"nats://a.chain:4222", "tls://b.chain:4222"},
			func(c settings.Config) bool {
				return c.NATS.CredsFile == "/etc/rxedge/store.creds" && c.NATS.CAFile == "/etc/rxedge/ca.pem"
			}},
		{"nkey", centralFlags{servers: "nats://a.chain:4222", nkeySeedFile: "/etc/rxedge/store.nk"}, []string{"nats://a.chain:4222"},
			func(c settings.Config) bool { return c.NATS.NKeySeedFile == "/etc/rxedge/store.nk" }},
		{"user", centralFlags{servers: "nats://a.chain:4222", user: "S0107", passwordFile: pw}, []string{"nats://a.chain:4222"},
			func(c settings.Config) bool { return c.NATS.User == "S0107" && c.NATS.Password == "s3cret" }},
		{"token", centralFlags{servers: "nats://a.chain:4222", tokenFile: tok}, []string{"nats://a.chain:4222"},
			func(c settings.Config) bool { return c.NATS.Token == "t0ken-S0107" && c.NATS.User == "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.flags.check(); err != nil {
				t.Fatal(err)
			}
			b, err := tc.flags.apply(configs.AgentExample)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "central.example") {
				t.Errorf("the example's placeholder server is in the config:\n%s", b)
			}
			path := filepath.Join(t.TempDir(), "agent.yaml")
			os.WriteFile(path, b, 0o600)
			c, err := settings.LoadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.NATS.Servers, tc.servers) || !tc.check(c) {
				t.Errorf("got servers %v and nats %+v, want servers %v", c.NATS.Servers, c.NATS, tc.servers)
			}
		})
	}
	for _, bad := range []centralFlags{
		{servers: "nats://a:4222", credsFile: "/a", nkeySeedFile: "/b"},
		{servers: "nats://a:4222", user: "u"},
		{servers: "nats://a:4222", credsFile: "/a", tokenFile: "/b"},
		{tokenFile: "/a"},
		{servers: "nats://a:4222", tokenFile: "relative.token"},
		{credsFile: "/a"},
		{servers: "nats://a:4222", credsFile: "relative.creds"},
	} {
		if err := bad.check(); err == nil {
			t.Errorf("%+v: accepted, want a usage error", bad)
		}
	}
}

// TestInstallRefusesPasswordWithLineBreak: a password file whose password
// spans lines is refused, naming the flag and never the password, rather
// than written as a YAML value that reads back as another password.
func TestInstallRefusesPasswordWithLineBreak(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "password")
	os.WriteFile(pw, []byte("first-half\nsecond-half\n"), 0o600)
	f := centralFlags{servers: "nats://a.chain:4222", user: "S0107", passwordFile: pw}
	b, err := f.apply(configs.AgentExample)
	if err == nil {
		t.Fatalf("accepted; config:\n%s", b)
	}
	if !strings.Contains(err.Error(), "--password-file") || !strings.Contains(err.Error(), "more than one line") || strings.Contains(err.Error(), "half") {
		t.Errorf("error %q: want it to name --password-file and the reason, not the password", err)
	}
}

// TestInstallDryRunRedactsAndChecks: a dry run prints no secret (the NATS
// password given in a file appears nowhere in its output, which goes into
// rollout tools' logs), and refuses, with install's own message, the
// settings install would refuse: a server URL with a scheme NATS does not
// speak, and a credentials file that does not exist.
func TestInstallDryRunRedactsAndChecks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the Linux plan")
	}
	fakeExecutable(t)
	cfg := absentConfig(t)
	pw := filepath.Join(t.TempDir(), "password")
	const secret = "s3cret-Pa55word-of-S0107"
	if err := os.WriteFile(pw, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, code := serviceCLI(t, "install", "--dry-run", "--store-id", "S0107", "--config", cfg,
		"--nats", "nats://central.example:4222", "--nats-user", "S0107", "--password-file", pw)
	if code != 0 {
		t.Fatalf("install --dry-run: exit %d\n%s%s", code, out, errs)
	}
	if strings.Contains(out+errs, secret) {
		t.Errorf("the dry run printed the password:\n%s", out)
	}
	if !strings.Contains(out, `password: "<redacted>"`) {
		t.Errorf("the dry run does not show the password as redacted:\n%s", out)
	}

	creds := filepath.Join(t.TempDir(), "missing.creds")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"http URL", []string{"--nats", "http://x"}, "nats.servers"},
		{"missing creds file", []string{"--nats", "nats://central.example:4222", "--creds", creds}, "creds_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"install", "--dry-run", "--store-id", "S0107", "--config", cfg}, tc.args...)
			out, errs, code := serviceCLI(t, args...)
			if code == 0 || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "install would refuse") {
				t.Errorf("install --dry-run %v: exit %d, want a refusal naming %s\nstdout: %s\nstderr: %s", tc.args, code, tc.want, out, errs)
			}
		})
	}
	if _, err := os.Stat(filepath.Dir(cfg)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dry run created %s: %v", filepath.Dir(cfg), err)
	}
}

// asServiceDataDir makes every data directory the service's for the test,
// as status reports the service only for the service's own directory.
func asServiceDataDir(t *testing.T) {
	saved := isServiceDataDir
	isServiceDataDir = func(string) bool { return true }
	t.Cleanup(func() { isServiceDataDir = saved })
}

// TestInstallWritesIntakesAndOperators: what an unattended install (the
// MSI's HL7_LISTEN, HL7_ALLOWED_HOSTS, ASAP_DIR, FORMULARY and
// OPERATOR_KEYS) gives is written into the new config, which the agent
// reads and accepts; a bad value is refused before anything is installed.
func TestInstallWritesIntakesAndOperators(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("plans the Linux install; the Windows plan is tested in installer")
	}
	fakeExecutable(t)
	cfg := absentConfig(t)
	dir := t.TempDir()
	formulary := filepath.Join(dir, "formulary.csv")
	if err := os.WriteFile(formulary, []byte("00406-0552-62,CII\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const key = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	args := []string{"install", "--dry-run", "--store-id", "S0107", "--config", cfg,
		"--hl7-listen", "0.0.0.0:2575", "--hl7-allowed-hosts", "10.1.0.0/16, 10.2.0.5", "--asap-dir", filepath.Join(dir, "asap"),
		"--formulary", formulary, "--operator-keys", key}
	out, errs, code := serviceCLI(t, args...)
	if code != 0 {
		t.Fatalf("install --dry-run: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	text := textBetween(t, out, "----- begin "+cfg+" -----\n", "----- end "+cfg+" -----\n")
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := settings.LoadFile(path)
	if err != nil {
		t.Fatalf("the planned config does not load: %v\n%s", err, text)
	}
	in := c.Intake
	if in.HL7.Listen != "0.0.0.0:2575" || strings.Join(in.HL7.AllowedHosts, ",") != "10.1.0.0/16,10.2.0.5" || in.ASAP.Dir != filepath.Join(dir, "asap") ||
		in.Formulary != formulary || strings.Join(c.Remote.OperatorKeys, ",") != key {
		t.Errorf("planned config: intake %+v, operator keys %v", in, c.Remote.OperatorKeys)
	}
	for _, bad := range [][]string{
		{"--hl7-listen", "0.0.0.0:2575"},           // no allowed hosts for a listener off loopback
		{"--operator-keys", "not-a-key"},           // not an NKey
		{"--asap-dir", filepath.Join(dir, "asap")}, // no formulary
		{"--formulary", "formulary.csv"},           // relative
	} {
		_, errs, code := serviceCLI(t, append([]string{"install", "--dry-run", "--store-id", "S0107", "--config", cfg}, bad...)...)
		if code == 0 {
			t.Errorf("install %v: accepted, want a refusal", bad)
		} else if !strings.Contains(errs, strings.TrimPrefix(bad[0], "--")[:4]) && !strings.Contains(errs, "intake") && !strings.Contains(errs, "remote") {
			t.Errorf("install %v: %s", bad, errs)
		}
	}
}
