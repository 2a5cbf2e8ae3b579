//go:build linux

package installer_test

import (
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/installer"
)

// TestPackageIntegration installs the .deb for real, as a chain's package
// manager does, then configures it unattended, upgrades it while it runs
// and removes it. RXEDGE_TEST_DEBS names two packages, the installed
// version and its upgrade (scripts/systemd-container.sh builds them with
// scripts/package.sh); like TestInstallIntegration it runs only with
// RXEDGE_TEST_INSTALL=1, as root under systemd.
func TestPackageIntegration(t *testing.T) {
	requireInstallTest(t)
	debs := strings.Fields(os.Getenv("RXEDGE_TEST_DEBS"))
	if len(debs) != 2 {
		t.Fatalf("RXEDGE_TEST_DEBS=%q: want two .deb files, the old version and its upgrade", os.Getenv("RXEDGE_TEST_DEBS"))
	}
	const bin = installer.PackageExecutable
	const unit = "/usr/lib/systemd/system/rxedge-agent.service"
	mustNotExist(t, bin)
	_, errUser := user.Lookup("rxedge")
	userExisted := errUser == nil
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("journalctl", "-u", "rxedge-agent", "--no-pager", "-n", "60").CombinedOutput()
			t.Logf("journal of rxedge-agent:\n%s", out)
		}
		exec.Command("dpkg", "--purge", "rxedge-agent").Run()
		os.RemoveAll(itestConfDir)
		os.RemoveAll(itestDataDir)
		if !userExisted {
			exec.Command("userdel", "rxedge").Run()
		}
	})
	config := filepath.Join(itestConfDir, "agent.yaml")
	token := filepath.Join(itestConfDir, "ingest.token")

	run(t, "dpkg", "-i", debs[0])
	checkPerm(t, itestConfDir, 0o750, "root", "rxedge")
	checkPerm(t, itestDataDir, 0o750, "rxedge", "rxedge")
	if got := strings.TrimSpace(systemctl(t, "is-enabled", "rxedge-agent")); got != "enabled" {
		t.Errorf("after dpkg -i: is-enabled %q, want enabled", got)
	}
	// Without a config the unit's condition keeps it from starting.
	if got := strings.TrimSpace(systemctl(t, "is-active", "rxedge-agent")); got == "active" {
		t.Errorf("after dpkg -i without a config: is-active %q, want not active", got)
	}

	// Unattended configuration: install sees the package's unit and only
	// writes the config and the token.
	out := run(t, bin, "install", "--store-id", "PKG01")
	if !strings.Contains(out, "installed "+installer.ServiceName) {
		t.Errorf("install on a packaged agent:\n%s", out)
	}
	if _, err := os.Stat(itestUnit); err == nil {
		t.Errorf("install wrote %s although the package's unit %s runs the service", itestUnit, unit)
	}
	run(t, bin, "start")
	waitActive(t)
	tokB, err := os.ReadFile(token)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(tokB))
	if code := post(t, tok, movement("pkg-1")); code != http.StatusAccepted {
		t.Fatalf("post with the token: %d, want 202", code)
	}

	// An upgrade restarts the running service on the new binary, with the
	// same data.
	pid := mainPID(t)
	run(t, "dpkg", "-i", debs[1])
	waitActive(t)
	if p := mainPID(t); p == pid || p == 0 {
		t.Errorf("upgrade did not restart the service (main pid %d before and %d after)", pid, p)
	}
	if v := run(t, bin, "version"); !strings.Contains(v, "1.0.1") {
		t.Errorf("version after the upgrade: %s", v)
	}
	if got := pending(t, bin); got != 1 {
		t.Errorf("pending after the upgrade: got %d, want 1", got)
	}
	if _, err := os.Stat(config); err != nil {
		t.Errorf("upgrade removed the config: %v", err)
	}

	// Removal stops the service and keeps the config, the token and the data.
	run(t, "dpkg", "-r", "rxedge-agent")
	if got := strings.TrimSpace(systemctl(t, "is-active", "rxedge-agent")); got == "active" {
		t.Errorf("after dpkg -r: is-active %q", got)
	}
	for _, gone := range []string{bin, unit} {
		if _, err := os.Stat(gone); err == nil {
			t.Errorf("dpkg -r left %s", gone)
		}
	}
	for _, kept := range []string{config, token, filepath.Join(itestDataDir, "agent.db")} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("dpkg -r removed %s: %v", kept, err)
		}
	}
}
