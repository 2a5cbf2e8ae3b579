//go:build linux

package installer_test

// TestInstallIntegration installs the real agent as a systemd service,
// starts it, kills it to see systemd bring it back, stops and uninstalls it,
// and checks that the config, the token and the data dir survive. It
// changes the machine it runs on, so it runs only when asked:
//
//	sudo RXEDGE_TEST_INSTALL=1 go test -run TestInstallIntegration -v ./installer
//
// (or `make test-install`). It needs root and systemd as PID 1 (a VM or a
// systemd container, not a plain Docker container); with RXEDGE_TEST_INSTALL=1
// set, a missing prerequisite fails the test rather than skipping it, so a
// skip is never mistaken for a pass. It refuses to run where rxedge-agent is
// already installed. It uses /usr/local/lib/rxedge-itest for the binary and
// /etc/rxedge-itest for the config (the unit's sandbox hides /tmp and
// /home from the service) and removes both afterwards, as well as the
// rxedge user and /var/lib/rxedge when it created them.
//
// By default install writes the default config; set RXEDGE_TEST_CONFIG to
// a config file to install with that one instead (it must name
// /var/lib/rxedge as data_dir and /etc/rxedge-itest/ingest.token as
// ingest.token_file).

import (
	"context"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rxedge/agent/installer"
)

const (
	itestBinDir  = "/usr/local/lib/rxedge-itest"
	itestConfDir = "/etc/rxedge-itest"
	itestUnit    = "/etc/systemd/system/rxedge-agent.service"
	itestDataDir = "/var/lib/rxedge"
)

func TestInstallIntegration(t *testing.T) {
	if os.Getenv("RXEDGE_TEST_INSTALL") != "1" {
		t.Skip("set RXEDGE_TEST_INSTALL=1 (as root, on a machine run by systemd) to install, start, stop and uninstall the real service; it changes this machine")
	}
	if os.Geteuid() != 0 {
		t.Fatal("RXEDGE_TEST_INSTALL=1 but not root: run it with sudo")
	}
	if comm, _ := os.ReadFile("/proc/1/comm"); strings.TrimSpace(string(comm)) != "systemd" {
		t.Fatalf("RXEDGE_TEST_INSTALL=1 but PID 1 is %q, not systemd: run it in a VM or a systemd container", strings.TrimSpace(string(comm)))
	}
	if _, err := os.Stat(itestUnit); err == nil {
		t.Fatalf("%s exists: rxedge-agent is installed here and this test will not touch a real installation", itestUnit)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("go not in PATH (sudo may reset PATH: use sudo env PATH=$PATH ...)")
	}

	_, errUser := user.Lookup("rxedge")
	userExisted := errUser == nil
	_, errData := os.Stat(itestDataDir)
	dataExisted := errData == nil

	// Build the agent and put it where the sandboxed service can run it.
	modRoot := run(t, goBin, "env", "GOMOD")
	build := filepath.Join(t.TempDir(), "rxedge-agent")
	cmd := exec.Command(goBin, "build", "-o", build, "./cmd/agent")
	cmd.Dir = filepath.Dir(strings.TrimSpace(modRoot))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/agent: %v\n%s", err, out)
	}
	bin := filepath.Join(itestBinDir, "rxedge-agent")
	mustNotExist(t, itestBinDir)
	mustNotExist(t, itestConfDir)
	t.Cleanup(func() {
		exec.Command(bin, "uninstall").Run()
		os.RemoveAll(itestBinDir)
		os.RemoveAll(itestConfDir)
		if !dataExisted {
			os.RemoveAll(itestDataDir)
		}
		if !userExisted {
			exec.Command("userdel", "rxedge").Run()
		}
	})
	copyFile(t, build, bin, 0o755)
	config := filepath.Join(itestConfDir, "agent.yaml")
	token := filepath.Join(itestConfDir, "ingest.token")
	// A first install needs the store id unless a config already exists.
	storeArgs := []string{"--store-id", "ITEST01"}
	if src := os.Getenv("RXEDGE_TEST_CONFIG"); src != "" {
		copyFile(t, src, config, 0o640)
		storeArgs = nil
	}

	agent := func(args ...string) string {
		t.Helper()
		return run(t, bin, args...)
	}

	// The dry run changes nothing and shows the unit that gets installed.
	dry := agent(append([]string{"install", "--dry-run", "--config", config}, storeArgs...)...)
	if _, err := os.Stat(itestUnit); err == nil {
		t.Fatal("install --dry-run wrote the unit")
	}
	if _, err := os.Stat(token); err == nil {
		t.Fatal("install --dry-run wrote the token")
	}
	wantUnit := between(t, dry, "----- begin "+itestUnit+" -----\n", "----- end "+itestUnit+" -----\n")

	agent(append([]string{"install", "--config", config}, storeArgs...)...)
	if got, err := os.ReadFile(itestUnit); err != nil || string(got) != wantUnit {
		t.Errorf("installed unit differs from the dry run (%v):\n--- installed ---\n%s\n--- dry run ---\n%s", err, got, wantUnit)
	}
	checkPerm(t, itestConfDir, 0o750, "root", "rxedge")
	checkPerm(t, itestDataDir, 0o750, "rxedge", "rxedge")
	checkPerm(t, token, 0o640, "root", "rxedge")
	checkPerm(t, config, 0o640, "root", "rxedge")
	tok1, _ := os.ReadFile(token)
	if b, err := hex.DecodeString(string(tok1)); err != nil || len(b) != 32 {
		t.Errorf("token is not 32 bytes of hex: %v", err)
	}
	if got := strings.TrimSpace(systemctl(t, "is-enabled", "rxedge-agent")); got != "enabled" {
		t.Errorf("is-enabled: got %q, want enabled", got)
	}
	wantState(t, installer.StateStopped)

	agent("start")
	waitActive(t)
	wantState(t, installer.StateRunning)

	// Killed, it comes back after RestartSec=5.
	pid := mainPID(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p := mainPID(t); p != 0 && p != pid && strings.TrimSpace(systemctl(t, "is-active", "rxedge-agent")) == "active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not restarted within 20 s after SIGKILL:\n%s", systemctl(t, "status", "--no-pager", "rxedge-agent"))
		}
		time.Sleep(250 * time.Millisecond)
	}

	start := time.Now()
	agent("stop")
	if d := time.Since(start); d > installer.StopTimeout+5*time.Second {
		t.Errorf("stop took %s, want at most %s", d, installer.StopTimeout)
	}
	if got := strings.TrimSpace(systemctl(t, "is-active", "rxedge-agent")); got != "inactive" {
		t.Errorf("after stop: is-active %q, want inactive", got)
	}
	wantState(t, installer.StateStopped)

	out := agent("uninstall")
	for _, want := range []string{config, token, itestDataDir} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall output does not name %s:\n%s", want, out)
		}
	}
	if _, err := os.Stat(itestUnit); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unit still there after uninstall: %v", err)
	}
	for _, kept := range []string{config, token, itestDataDir} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("uninstall removed %s: %v", kept, err)
		}
	}
	wantState(t, installer.StateNotInstalled)

	// Installing again keeps the token (and the config).
	agent("install", "--config", config)
	if tok2, _ := os.ReadFile(token); string(tok2) != string(tok1) {
		t.Error("second install replaced the ingest token")
	}
	agent("uninstall")
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// systemctl runs systemctl, whose non-zero exits (is-active on an inactive
// unit) are answers, not failures.
func systemctl(t *testing.T, args ...string) string {
	t.Helper()
	out, _ := exec.Command("systemctl", args...).CombinedOutput()
	return string(out)
}

func mainPID(t *testing.T) int {
	t.Helper()
	v := strings.TrimSpace(strings.TrimPrefix(systemctl(t, "show", "-p", "MainPID", "rxedge-agent"), "MainPID="))
	pid, _ := strconv.Atoi(v)
	return pid
}

// waitActive waits for the service to be active and checks that it stays
// up without restarts, so a crash loop does not pass.
func waitActive(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for strings.TrimSpace(systemctl(t, "is-active", "rxedge-agent")) != "active" {
		if time.Now().After(deadline) {
			t.Fatalf("not active within 15 s:\n%s", systemctl(t, "status", "--no-pager", "rxedge-agent"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	show := systemctl(t, "show", "-p", "ActiveState", "-p", "NRestarts", "rxedge-agent")
	if !strings.Contains(show, "ActiveState=active") || !strings.Contains(show, "NRestarts=0") {
		t.Fatalf("service does not stay up:\n%s\n%s", show, systemctl(t, "status", "--no-pager", "rxedge-agent"))
	}
}

func wantState(t *testing.T, want installer.State) {
	t.Helper()
	if got, err := installer.Status(installer.ServiceName); got != want || err != nil {
		t.Errorf("Status: got %q, %v; want %q", got, err, want)
	}
}

func between(t *testing.T, s, begin, end string) string {
	t.Helper()
	_, rest, ok := strings.Cut(s, begin)
	body, _, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("dry run has no %q ... %q block:\n%s", begin, end, s)
	}
	return body
}

func checkPerm(t *testing.T, path string, mode fs.FileMode, owner, group string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	u, _ := user.LookupId(strconv.Itoa(int(st.Uid)))
	g, _ := user.LookupGroupId(strconv.Itoa(int(st.Gid)))
	if fi.Mode().Perm() != mode || u == nil || u.Username != owner || g == nil || g.Name != group {
		t.Errorf("%s: got %04o uid %d gid %d, want %04o %s:%s", path, fi.Mode().Perm(), st.Uid, st.Gid, mode, owner, group)
	}
}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Fatalf("%s exists (left by an earlier run?); remove it first", path)
	}
}

func copyFile(t *testing.T, src, dst string, mode fs.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}
