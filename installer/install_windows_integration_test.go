//go:build windows

package installer_test

// TestInstallWindowsIntegration installs the real agent as a Windows
// service and drives it through the service control manager: install,
// start, a movement posted with the ingest token, the process killed and
// restarted by the recovery actions with nothing lost, stop, and an
// uninstall that keeps the config, the token and the data. It changes the
// machine, so it runs only when asked, from an elevated prompt (the
// Windows job of .github/workflows/ci.yml does):
//
//	set RXEDGE_TEST_INSTALL=1 && go test -run TestInstallWindowsIntegration -v ./installer
//
// It refuses to run where rxedge-agent is installed or %ProgramData%\RxEdge
// exists, and removes what it created.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"

	"github.com/rxedge/agent/installer"
)

func TestInstallWindowsIntegration(t *testing.T) {
	if os.Getenv("RXEDGE_TEST_INSTALL") != "1" {
		t.Skip("set RXEDGE_TEST_INSTALL=1 (from an elevated prompt) to install, start, kill, stop and uninstall the real service; it changes this machine")
	}
	if !windows.GetCurrentProcessToken().IsElevated() {
		t.Fatal("RXEDGE_TEST_INSTALL=1 but not elevated: run it as Administrator")
	}
	ps := installer.DefaultPaths("windows")
	if st, _ := installer.Status(installer.ServiceName); st != installer.StateNotInstalled {
		t.Fatalf("%s is %s here; this test will not touch a real installation", installer.ServiceName, st)
	}
	if _, err := os.Stat(ps.ConfigDir); err == nil {
		t.Fatalf("%s exists; this test will not touch a real installation", ps.ConfigDir)
	}

	// The service account cannot read user profiles (where go test builds),
	// so the binary goes under Program Files.
	binDir := filepath.Join(os.Getenv("ProgramFiles"), "RxEdge-itest")
	bin := filepath.Join(binDir, "rxedge-agent.exe")
	if _, err := os.Stat(binDir); err == nil {
		t.Fatalf("%s exists (left by an earlier run?); remove it first", binDir)
	}
	t.Cleanup(func() {
		exec.Command(bin, "uninstall").Run()
		os.RemoveAll(binDir)
		os.RemoveAll(ps.ConfigDir)
	})
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin, "./cmd/agent")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	agent := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("rxedge-agent %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	agent("install", "--store-id", "ITEST01")
	agent("start")
	pid := waitRunning(t, 0)

	tokB, err := os.ReadFile(ps.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(tokB))
	body := fmt.Sprintf(`{"movement_id":"win-1","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":%q}`, time.Now().UTC().Format(time.RFC3339))
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:8717/v1/movements", bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post with the token: %v %v, want 202", resp, err)
	}
	resp.Body.Close()

	// Killed, the recovery actions start it again after 5 s.
	h, err := windows.OpenProcess(windows.PROCESS_TERMINATE, false, pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := windows.TerminateProcess(h, 1); err != nil {
		t.Fatal(err)
	}
	windows.CloseHandle(h)
	waitRunning(t, pid)
	if got := winPending(t, bin); got != 1 {
		t.Errorf("pending after the kill and the restart: got %d, want 1", got)
	}

	agent("stop")
	if st, err := installer.Status(installer.ServiceName); st != installer.StateStopped {
		t.Errorf("after stop: %s, %v; want stopped", st, err)
	}
	out := agent("uninstall")
	for _, kept := range []string{ps.ConfigFile, ps.TokenFile, filepath.Join(ps.DataDir, "agent.db")} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("uninstall removed %s: %v\n%s", kept, err, out)
		}
	}
	if st, _ := installer.Status(installer.ServiceName); st != installer.StateNotInstalled {
		t.Errorf("after uninstall: %s, want not installed", st)
	}
}

// waitRunning waits until the service runs in a process other than old and
// returns its process id.
func waitRunning(t *testing.T, old uint32) uint32 {
	t.Helper()
	m, err := mgr.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(installer.ServiceName)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := s.Query()
		if err == nil && st.State == svc.Running && st.ProcessId != 0 && st.ProcessId != old {
			return st.ProcessId
		}
		if time.Now().After(deadline) {
			t.Fatalf("service not running in a new process within 60 s: %+v, %v", st, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func winPending(t *testing.T, bin string) int {
	t.Helper()
	out, _ := exec.Command(bin, "status", "--json").Output()
	var st struct {
		Counts struct {
			Pending struct {
				Total int `json:"total"`
			} `json:"pending"`
		} `json:"counts"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return st.Counts.Pending.Total
}
