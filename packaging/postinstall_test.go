//go:build unix

package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPostinstallKeepsEnabledChoice runs postinstall.sh as dpkg and rpm
// call it, with systemctl, getent, useradd and install replaced by
// recorders: a first installation enables the service, an upgrade does not
// (an administrator's disable survives it), and both restart a running
// agent on the new binary.
func TestPostinstallKeepsEnabledChoice(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		enable bool
	}{
		{"deb first install", []string{"configure", ""}, true},
		{"deb first install, no version argument", []string{"configure"}, true},
		{"deb upgrade", []string{"configure", "1.4.0"}, false},
		{"rpm first install", []string{"1"}, true},
		{"rpm upgrade", []string{"2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			log := filepath.Join(t.TempDir(), "calls")
			for _, name := range []string{"systemctl", "getent", "useradd", "install"} {
				script := "#!/bin/sh\necho \"" + name + " $*\" >> " + log + "\n"
				if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("sh", append([]string{"postinstall.sh"}, tc.args...)...)
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "RXEDGE_SYSTEMD_RUN="+t.TempDir())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("postinstall.sh %v: %v\n%s", tc.args, err, out)
			}
			b, _ := os.ReadFile(log)
			calls := string(b)
			if got := strings.Contains(calls, "systemctl enable rxedge-agent.service"); got != tc.enable {
				t.Errorf("enable called: %v, want %v\n%s", got, tc.enable, calls)
			}
			if !strings.Contains(calls, "systemctl try-restart rxedge-agent.service") || !strings.Contains(calls, "systemctl daemon-reload") {
				t.Errorf("no daemon-reload and try-restart:\n%s", calls)
			}
			if strings.Contains(calls, "systemctl start") || strings.Contains(calls, "systemctl restart") {
				t.Errorf("a stopped agent was started:\n%s", calls)
			}
		})
	}
}
