//go:build linux

package installer_test

// TestInstallIntegration installs the real agent as a systemd service and
// drives it through its life: install, start (Type=notify: active only once
// it accepts movements), a movement posted with the ingest token, `status`
// as root and as an unprivileged user, SIGKILL and the automatic restart
// with nothing lost, a hung agent (SIGSTOP) restarted by the watchdog, a
// stop under load that loses no acknowledged movement, an upgrade in place
// (new binary, same data) and an uninstall that keeps the config, the
// token and the data. It changes the machine it
// runs on, so it runs only when asked:
//
//	sudo RXEDGE_TEST_INSTALL=1 go test -run TestInstallIntegration -v ./installer
//
// (or `make test-install`); scripts/systemd-container.sh runs it in a
// throwaway systemd container, which is how CI runs it. It needs root and
// systemd as PID 1; with RXEDGE_TEST_INSTALL=1 set, a missing prerequisite
// fails the test rather than skipping it, so a skip is never mistaken for a
// pass. It refuses to run where rxedge-agent, /etc/rxedge or
// /var/lib/rxedge already exist, and removes what it created afterwards.
//
// RXEDGE_TEST_AGENT and RXEDGE_TEST_AGENT_NEW name prebuilt agent binaries
// (the installed one and its upgrade); without them the test builds both
// with go.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rxedge/agent/installer"
)

const (
	itestBinDir  = "/usr/local/lib/rxedge-itest"
	itestConfDir = "/etc/rxedge"
	itestUnit    = "/etc/systemd/system/rxedge-agent.service"
	itestDataDir = "/var/lib/rxedge"
	itestIngest  = "http://127.0.0.1:8717/v1/movements"
)

// requireInstallTest fails unless the machine can take a real install.
func requireInstallTest(t *testing.T) {
	t.Helper()
	if os.Getenv("RXEDGE_TEST_INSTALL") != "1" {
		t.Skip("set RXEDGE_TEST_INSTALL=1 (as root, on a machine run by systemd) to install, start, stop and uninstall the real service; it changes this machine")
	}
	if os.Geteuid() != 0 {
		t.Fatal("RXEDGE_TEST_INSTALL=1 but not root: run it with sudo")
	}
	if comm, _ := os.ReadFile("/proc/1/comm"); strings.TrimSpace(string(comm)) != "systemd" {
		t.Fatalf("RXEDGE_TEST_INSTALL=1 but PID 1 is %q, not systemd: run it in a VM or a systemd container (scripts/systemd-container.sh)", strings.TrimSpace(string(comm)))
	}
	for _, p := range []string{itestUnit, "/lib/systemd/system/rxedge-agent.service", itestConfDir, itestDataDir} {
		mustNotExist(t, p)
	}
}

// agentBinaries returns the agent to install and the one to upgrade to.
func agentBinaries(t *testing.T) (old, new string) {
	t.Helper()
	old, new = os.Getenv("RXEDGE_TEST_AGENT"), os.Getenv("RXEDGE_TEST_AGENT_NEW")
	if old != "" && new != "" {
		return old, new
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("set RXEDGE_TEST_AGENT and RXEDGE_TEST_AGENT_NEW, or put go in PATH (sudo may reset PATH: use sudo env PATH=$PATH ...)")
	}
	modRoot := filepath.Dir(strings.TrimSpace(run(t, goBin, "env", "GOMOD")))
	dir := t.TempDir()
	for i, v := range []string{"1.0.0-itest", "1.0.1-itest"} {
		out := filepath.Join(dir, fmt.Sprintf("rxedge-agent-%d", i))
		cmd := exec.Command(goBin, "build", "-tags", "rxedge_nodev", "-ldflags", "-X github.com/rxedge/agent/internal/version.Version="+v, "-o", out, "./cmd/agent")
		cmd.Dir = modRoot
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/agent: %v\n%s", err, b)
		}
		if i == 0 {
			old = out
		} else {
			new = out
		}
	}
	return old, new
}

func TestInstallIntegration(t *testing.T) {
	requireInstallTest(t)
	oldBin, newBin := agentBinaries(t)

	_, errUser := user.Lookup("rxedge")
	userExisted := errUser == nil
	bin := filepath.Join(itestBinDir, "rxedge-agent")
	mustNotExist(t, itestBinDir)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("journalctl", "-u", "rxedge-agent", "--no-pager", "-n", "60").CombinedOutput()
			t.Logf("journal of rxedge-agent:\n%s", out)
		}
		exec.Command(bin, "uninstall").Run()
		os.RemoveAll("/etc/systemd/system/rxedge-agent.service.d")
		os.RemoveAll(itestBinDir)
		os.RemoveAll(itestConfDir)
		os.RemoveAll(itestDataDir)
		if !userExisted {
			exec.Command("userdel", "rxedge").Run()
		}
	})
	copyFile(t, oldBin, bin, 0o755)
	config := filepath.Join(itestConfDir, "agent.yaml")
	token := filepath.Join(itestConfDir, "ingest.token")

	agent := func(args ...string) string {
		t.Helper()
		return run(t, bin, args...)
	}

	// The dry run changes nothing and shows the unit that gets installed.
	dry := agent("install", "--dry-run", "--store-id", "ITEST01")
	if _, err := os.Stat(itestUnit); err == nil {
		t.Fatal("install --dry-run wrote the unit")
	}
	if _, err := os.Stat(token); err == nil {
		t.Fatal("install --dry-run wrote the token")
	}
	wantUnit := between(t, dry, "----- begin "+itestUnit+" -----\n", "----- end "+itestUnit+" -----\n")

	agent("install", "--store-id", "ITEST01")
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
	checkExposure(t)

	// Before the first start, status names the service state.
	out, code := runCode(t, nil, bin, "status")
	if !strings.Contains(out, "stopped") || code == 0 || code == 2 {
		t.Errorf("status before the first start: exit %d, want 1 or 3 naming the stopped service:\n%s", code, out)
	}

	agent("start")
	waitActive(t)
	wantState(t, installer.StateRunning)

	tok := strings.TrimSpace(string(tok1))
	if code := post(t, "", movement("first")); code != http.StatusUnauthorized {
		t.Errorf("post without the token: %d, want 401", code)
	}
	if code := post(t, tok, movement("first")); code != http.StatusAccepted {
		t.Fatalf("post with the token: %d, want 202", code)
	}

	// status: as root it reads the default config; as anyone else it
	// says to run it as an administrator.
	if got := pending(t, bin); got != 1 {
		t.Errorf("pending after one post: got %d, want 1", got)
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	out, code = runCode(t, nobody, bin, "status")
	if code != 1 || !strings.Contains(out, "administrator") || strings.Contains(out, "which agent") {
		t.Errorf("status as nobody: exit %d, want 1 and a hint to run it as an administrator:\n%s", code, out)
	}

	// Killed, it comes back after RestartSec=5 with everything it had.
	pid := mainPID(t)
	systemctl(t, "kill", "-s", "KILL", "rxedge-agent")
	waitFor(t, 30*time.Second, "restart after SIGKILL", func() bool {
		p := mainPID(t)
		return p != 0 && p != pid && strings.TrimSpace(systemctl(t, "is-active", "rxedge-agent")) == "active"
	})
	if got := pending(t, bin); got != 1 {
		t.Errorf("pending after SIGKILL and restart: got %d, want 1", got)
	}

	// The watchdog: an agent that stops answering (SIGSTOP) is killed and
	// restarted. A drop-in shortens the 30 s of the unit for the test.
	dropIn := "/etc/systemd/system/rxedge-agent.service.d"
	if err := os.MkdirAll(dropIn, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dropIn+"/watchdog.conf", []byte("[Service]\nWatchdogSec=2\nTimeoutAbortSec=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	systemctl(t, "daemon-reload")
	agent("restart")
	waitActive(t)
	pid = mainPID(t)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 40*time.Second, "restart by the watchdog of a stopped agent", func() bool {
		p := mainPID(t)
		return p != 0 && p != pid && strings.TrimSpace(systemctl(t, "is-active", "rxedge-agent")) == "active"
	})
	os.RemoveAll(dropIn)
	systemctl(t, "daemon-reload")
	agent("restart")
	waitActive(t)
	if got := pending(t, bin); got != 1 {
		t.Errorf("pending after the watchdog restart: got %d, want 1", got)
	}

	// Stop under load: every acknowledged movement is in the data file.
	acked, tried := load(t, tok, func() {
		start := time.Now()
		agent("stop")
		if d := time.Since(start); d > installer.StopTimeout+5*time.Second {
			t.Errorf("stop took %s, want at most %s", d, installer.StopTimeout)
		}
	})
	if acked == 0 {
		t.Error("no movement was acknowledged before the stop; the load did not reach the agent")
	}
	if got := strings.TrimSpace(systemctl(t, "is-active", "rxedge-agent")); got != "inactive" {
		t.Errorf("after stop: is-active %q, want inactive", got)
	}
	wantState(t, installer.StateStopped)
	got := pending(t, bin)
	if got < 1+acked || got > 1+tried {
		t.Errorf("after a stop under load: %d pending, want between %d (acknowledged) and %d (sent)", got, 1+acked, 1+tried)
	}
	t.Logf("stop under load: %d acknowledged of %d sent, %d pending", acked, tried, got)

	// Upgrade in place: a new binary over the old one, the same data.
	copyFile(t, newBin, bin+".new", 0o755)
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	agent("start")
	waitActive(t)
	if v := agent("version"); !strings.Contains(v, "1.0.1-itest") {
		t.Errorf("version after the upgrade: %s", v)
	}
	if after := pending(t, bin); after != got {
		t.Errorf("pending after the upgrade: got %d, want %d", after, got)
	}
	if code := post(t, tok, movement("after-upgrade")); code != http.StatusAccepted {
		t.Errorf("post after the upgrade: %d, want 202", code)
	}

	out = agent("uninstall")
	for _, want := range []string{config, token, itestDataDir} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall output does not name %s:\n%s", want, out)
		}
	}
	if _, err := os.Stat(itestUnit); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unit still there after uninstall: %v", err)
	}
	for _, kept := range []string{config, token, itestDataDir, filepath.Join(itestDataDir, "agent.db")} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("uninstall removed %s: %v", kept, err)
		}
	}
	wantState(t, installer.StateNotInstalled)

	// Installing again keeps the token, the config and the data.
	agent("install")
	if tok2, _ := os.ReadFile(token); string(tok2) != string(tok1) {
		t.Error("second install replaced the ingest token")
	}
	if after := pending(t, bin); after != got+1 {
		t.Errorf("pending after reinstall: got %d, want %d", after, got+1)
	}
	agent("uninstall")
}

// maxExposure is the highest `systemd-analyze security` exposure the
// unit may have.
const maxExposure = 2.5

// checkExposure rates the installed unit with systemd-analyze security.
func checkExposure(t *testing.T) {
	t.Helper()
	out, _ := exec.Command("systemd-analyze", "security", "--no-pager", "rxedge-agent.service").CombinedOutput()
	const marker = "Overall exposure level for rxedge-agent.service: "
	i := strings.Index(string(out), marker)
	if i < 0 {
		t.Errorf("systemd-analyze security printed no overall exposure:\n%s", out)
		return
	}
	f := strings.Fields(string(out)[i+len(marker):])
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v > maxExposure {
		t.Errorf("exposure %s, want at most %.1f:\n%s", strings.Join(f[:2], " "), maxExposure, out)
		return
	}
	t.Logf("systemd-analyze security: exposure %s %s", f[0], f[1])
	if testing.Verbose() {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "✗") {
				t.Log(l)
			}
		}
	}
}

// movement is a valid movement with the given id.
func movement(id string) []byte {
	return []byte(fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":%q}`,
		id, time.Now().UTC().Format(time.RFC3339)))
}

var ingestClient = &http.Client{Timeout: 10 * time.Second}

// post submits body to the ingest listener and returns the status code, or
// 0 when no answer came.
func post(t *testing.T, token string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, itestIngest, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := ingestClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// load posts movements from four clients until stop returns, and reports
// how many were acknowledged and how many were sent.
func load(t *testing.T, token string, stop func()) (acked, tried int) {
	t.Helper()
	var nAcked, nTried atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				nTried.Add(1)
				if code := post(t, token, movement(fmt.Sprintf("load-%d-%d", w, i))); code == http.StatusAccepted {
					nAcked.Add(1)
				} else if code == 0 {
					return // the listener is gone
				}
			}
		}()
	}
	waitFor(t, 20*time.Second, "50 acknowledged movements under load", func() bool { return nAcked.Load() >= 50 })
	stop()
	close(done)
	wg.Wait()
	return int(nAcked.Load()), int(nTried.Load())
}

// pending reads the pending count with `status --json` (as root).
func pending(t *testing.T, bin string) int {
	t.Helper()
	out, code := runCode(t, nil, bin, "status", "--json")
	if code != 0 && code != 3 {
		t.Fatalf("status --json: exit %d\n%s", code, out)
	}
	var st struct {
		Counts struct {
			Pending struct {
				Total int `json:"total"`
			} `json:"pending"`
		} `json:"counts"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return st.Counts.Pending.Total
}

// runCode runs a command, as cred when not nil, and returns its combined
// output and exit code.
func runCode(t *testing.T, cred *syscall.Credential, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/"
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(out), 0
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s:\n%s", what, d, systemctl(t, "status", "--no-pager", "rxedge-agent"))
		}
		time.Sleep(100 * time.Millisecond)
	}
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

// waitActive waits for the service to be active and checks that it
// answers at once.
func waitActive(t *testing.T) {
	t.Helper()
	waitFor(t, 30*time.Second, "active", func() bool {
		return strings.TrimSpace(systemctl(t, "is-active", "rxedge-agent")) == "active"
	})
	// Type=notify: active means the agent said READY=1, so it accepts
	// movements now.
	if code := post(t, "", []byte("{}")); code == 0 {
		t.Fatalf("active, but the ingest listener does not answer:\n%s", systemctl(t, "status", "--no-pager", "rxedge-agent"))
	}
	show := systemctl(t, "show", "-p", "ActiveState", "-p", "SubState", "rxedge-agent")
	if !strings.Contains(show, "ActiveState=active") || !strings.Contains(show, "SubState=running") {
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
