//go:build linux

package installer_test

import (
	"os"
	"os/exec"
	"os/user"
	"strings"
	"testing"

	"github.com/rxedge/agent/installer"
)

// TestHQPackageIntegration installs head office's .deb for real beside the
// store's: the sink's unit and files are rxedge-hq's (rxedge-agent no
// longer ships them), the unit runs rxedge-hq and is neither enabled nor
// started, and removal takes the binary and the unit and leaves the
// settings directory. RXEDGE_TEST_HQ_DEB names the package and
// RXEDGE_TEST_DEBS the store's (the second, the upgrade, is installed
// beside it); it runs only with RXEDGE_TEST_INSTALL=1, as root under
// systemd (scripts/systemd-container.sh).
func TestHQPackageIntegration(t *testing.T) {
	requireInstallTest(t)
	hq, agents := os.Getenv("RXEDGE_TEST_HQ_DEB"), strings.Fields(os.Getenv("RXEDGE_TEST_DEBS"))
	if hq == "" || len(agents) != 2 {
		t.Fatalf("RXEDGE_TEST_HQ_DEB=%q, RXEDGE_TEST_DEBS=%q: want rxedge-hq's .deb and the store's two", hq, os.Getenv("RXEDGE_TEST_DEBS"))
	}
	const bin, unit = "/usr/bin/rxedge-hq", "/usr/lib/systemd/system/rxedge-sink.service"
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
	for _, f := range []string{unit, "/usr/share/rxedge/sink.yaml.example", "/usr/share/rxedge/sink-grants.sql"} {
		if owner := strings.TrimSpace(run(t, "dpkg", "-S", f)); !strings.HasPrefix(owner, "rxedge-hq: ") {
			t.Errorf("%s belongs to %q, want rxedge-hq", f, owner)
		}
	}
	if b, err := os.ReadFile(unit); err != nil || !strings.Contains(string(b), "ExecStart=/usr/bin/rxedge-hq \"sink\"") {
		t.Errorf("the sink's unit: %v\n%s", err, b)
	}
	if got := strings.TrimSpace(systemctl(t, "is-enabled", "rxedge-sink")); got == "enabled" {
		t.Errorf("after dpkg -i: rxedge-sink is-enabled %q, want disabled", got)
	}
	if got := strings.TrimSpace(systemctl(t, "is-active", "rxedge-sink")); got == "active" {
		t.Errorf("after dpkg -i: rxedge-sink is-active %q", got)
	}
	checkPerm(t, itestConfDir, 0o750, "root", "rxedge") // the store's package made it; rxedge-hq's leaves it

	run(t, "dpkg", "-r", "rxedge-hq")
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
