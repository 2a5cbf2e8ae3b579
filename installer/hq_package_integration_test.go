//go:build linux

package installer_test

import (
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/installer"
)

// TestHQPackageIntegration installs head office's .deb for real beside the
// store's: hq run's unit and the sink's files are rxedge-hq's (rxedge-agent
// no longer ships them), the unit is neither enabled nor started, systemd
// finds nothing wrong in it, and, given settings and credentials, it
// starts as its dynamic user and becomes ready (/readyz 200: its sink
// retries a database that is not there); removal takes the binary and the
// unit and leaves the settings directory. RXEDGE_TEST_HQ_DEB names the package and
// RXEDGE_TEST_DEBS the store's (the second, the upgrade, is installed
// beside it); it runs only with RXEDGE_TEST_INSTALL=1, as root under
// systemd (scripts/systemd-container.sh).
func TestHQPackageIntegration(t *testing.T) {
	requireInstallTest(t)
	hq, agents := os.Getenv("RXEDGE_TEST_HQ_DEB"), strings.Fields(os.Getenv("RXEDGE_TEST_DEBS"))
	if hq == "" || len(agents) != 2 {
		t.Fatalf("RXEDGE_TEST_HQ_DEB=%q, RXEDGE_TEST_DEBS=%q: want rxedge-hq's .deb and the store's two", hq, os.Getenv("RXEDGE_TEST_DEBS"))
	}
	const bin, unit = "/usr/bin/rxedge-hq", "/usr/lib/systemd/system/rxedge-hq.service"
	mustNotExist(t, bin)
	_, errUser := user.Lookup("rxedge")
	userExisted := errUser == nil
	t.Cleanup(func() {
		exec.Command("dpkg", "--purge", "rxedge-hq", "rxedge-agent").Run()
		os.RemoveAll(itestConfDir)
		os.RemoveAll(itestDataDir)
		if !userExisted {
			exec.Command("userdel", "rxedge").Run()
		}
	})

	run(t, "dpkg", "-i", agents[1])
	run(t, "dpkg", "-i", hq)
	if v := run(t, bin, "version"); !strings.Contains(v, "1.0.1") {
		t.Errorf("rxedge-hq version: %s", v)
	}
	for _, f := range []string{unit, "/usr/share/rxedge/hq.yaml.example", "/usr/share/rxedge/sink.yaml.example", "/usr/share/rxedge/sink-grants.sql"} {
		if owner := strings.TrimSpace(run(t, "dpkg", "-S", f)); !strings.HasPrefix(owner, "rxedge-hq: ") {
			t.Errorf("%s belongs to %q, want rxedge-hq", f, owner)
		}
	}
	if b, err := os.ReadFile(unit); err != nil || !strings.Contains(string(b), "ExecStart=/usr/bin/rxedge-hq \"run\"") {
		t.Errorf("hq run's unit: %v\n%s", err, b)
	}
	if out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
	if got := strings.TrimSpace(systemctl(t, "is-enabled", "rxedge-hq")); got == "enabled" {
		t.Errorf("after dpkg -i: rxedge-hq is-enabled %q, want disabled", got)
	}
	if got := strings.TrimSpace(systemctl(t, "is-active", "rxedge-hq")); got == "active" {
		t.Errorf("after dpkg -i: rxedge-hq is-active %q", got)
	}
	checkPerm(t, itestConfDir, 0o750, "root", "rxedge") // the store's package made it; rxedge-hq's leaves it
	checkPerm(t, itestConfDir+"/hq.credentials", 0o700, "root", "root")
	startHQ(t)

	run(t, "dpkg", "-r", "rxedge-hq")
	if got := strings.TrimSpace(systemctl(t, "is-active", "rxedge-hq")); got == "active" {
		t.Errorf("after dpkg -r: rxedge-hq is-active %q", got)
	}
	for _, gone := range []string{bin, unit} {
		if _, err := os.Stat(gone); err == nil {
			t.Errorf("dpkg -r left %s", gone)
		}
	}
	if _, err := os.Stat(itestConfDir); err != nil {
		t.Errorf("dpkg -r rxedge-hq removed %s: %v", itestConfDir, err)
	}
	if _, err := os.Stat(installer.PackageExecutable); err != nil {
		t.Errorf("dpkg -r rxedge-hq removed the store's agent: %v", err)
	}
}

// startHQ writes settings of hq run whose one job, the sink, has no
// database to reach, and its two passwords as credentials, starts the
// unit, and waits until it is active and /readyz answers 200 (the sink
// retrying is ready); its state directory is made for its dynamic user.
func startHQ(t *testing.T) {
	t.Helper()
	files := map[string]string{
		itestConfDir + "/hq.yaml": `listen: 127.0.0.1:9467
postgres:
  url: postgres://rxedge_sink@127.0.0.1:1/rxedge
  password: {credential: hq_postgres}
nats:
  servers: nats://127.0.0.1:1
  partitions: 1
  audit: {user: audit, password: {credential: hq_nats-audit}}
witness: {enabled: false}
verify: {enabled: false}
reconcile: {enabled: false}
fleet: {enabled: false}
`,
		itestConfDir + "/hq.credentials/postgres":   "pg-password\n",
		itestConfDir + "/hq.credentials/nats-audit": "audit-password\n",
	}
	for path, text := range files {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	systemctl(t, "start", "rxedge-hq")
	t.Cleanup(func() { exec.Command("systemctl", "stop", "rxedge-hq").Run() })
	deadline := time.Now().Add(time.Minute)
	for {
		active := strings.TrimSpace(systemctl(t, "is-active", "rxedge-hq")) == "active"
		resp, err := http.Get("http://127.0.0.1:9467/readyz")
		code := 0
		if err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		if active && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			out, _ := exec.Command("journalctl", "-u", "rxedge-hq", "--no-pager", "-n", "40").CombinedOutput()
			t.Fatalf("rxedge-hq not active and ready within a minute (active %v, /readyz %d, %v):\n%s", active, code, err, out)
		}
		time.Sleep(200 * time.Millisecond) // polled: a unit systemd starts
	}
	if _, err := os.Stat("/var/lib/private/rxedge-hq"); err != nil {
		t.Errorf("the service's state directory: %v", err)
	}
	systemctl(t, "stop", "rxedge-hq")
}
