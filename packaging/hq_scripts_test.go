//go:build unix

package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runScript runs a maintainer script as dpkg and rpm call it, with
// systemctl and install replaced by recorders, and returns the calls.
func runScript(t *testing.T, script string, args ...string) string {
	t.Helper()
	bin := t.TempDir()
	log := filepath.Join(t.TempDir(), "calls")
	for _, name := range []string{"systemctl", "install"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\necho \""+name+" $*\" >> "+log+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "RXEDGE_SYSTEMD_RUN="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
	b, _ := os.ReadFile(log)
	return string(b)
}

// TestHQScripts: rxedge-hq's package never enables or starts hq run's
// unit; an upgrade restarts a running one on the new binary, and tells
// of a sink still running from an earlier version's rxedge-sink.service;
// a removal stops and disables both, an upgrade's preremove leaves them
// running.
func TestHQScripts(t *testing.T) {
	for _, args := range [][]string{{"configure", ""}, {"configure", "1.4.0"}, {"1"}, {"2"}} {
		calls := runScript(t, "hq-postinstall.sh", args...)
		if !strings.Contains(calls, "systemctl daemon-reload") || !strings.Contains(calls, "systemctl try-restart rxedge-hq.service") ||
			!strings.Contains(calls, "systemctl is-active --quiet rxedge-sink.service") ||
			strings.Contains(calls, "enable") || strings.Contains(calls, "systemctl start") || strings.Contains(calls, "systemctl restart") {
			t.Errorf("postinstall %v:\n%s", args, calls)
		}
	}
	for _, tc := range []struct {
		args    []string
		disable bool
	}{{[]string{"remove"}, true}, {[]string{"0"}, true}, {[]string{"upgrade", "1.4.1"}, false}, {[]string{"1"}, false}} {
		calls := runScript(t, "hq-preremove.sh", tc.args...)
		got := strings.Contains(calls, "systemctl disable --now rxedge-hq.service") && strings.Contains(calls, "systemctl disable --now rxedge-sink.service")
		if got != tc.disable || (!tc.disable && calls != "") || strings.Contains(calls, "rxedge-agent") {
			t.Errorf("preremove %v: disable %v, want %v\n%s", tc.args, got, tc.disable, calls)
		}
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHQPackageHoldsTheService: hq run's unit, its example settings and
// the sink's files ship in rxedge-hq's package, and none of them in the
// store's; the sink's own unit is gone.
func TestHQPackageHoldsTheService(t *testing.T) {
	agent, hq := readFile(t, "nfpm.yaml"), readFile(t, "nfpm-hq.yaml")
	for _, f := range []string{"packaging/rxedge-hq.service", "configs/hq.yaml", "configs/sink.yaml", "configs/postgres/sink-grants.sql"} {
		if strings.Contains(agent, f) || !strings.Contains(hq, "src: "+f) {
			t.Errorf("%s: in the store's package %v, in head office's %v; want head office's only", f, strings.Contains(agent, f), strings.Contains(hq, f))
		}
	}
	if strings.Contains(hq, "src: packaging/rxedge-sink.service") || !strings.Contains(hq, "dst: /usr/bin/rxedge-hq") {
		t.Error("rxedge-hq's package ships the sink's own unit, or does not install /usr/bin/rxedge-hq")
	}
}

// TestHQUnit: hq run's unit runs the service on /etc/rxedge/hq.yaml as a
// dynamic user, with the settings and its secrets as credentials, its state in a state
// directory, and the hardening of the store's unit and more; systemd
// finds nothing wrong in it (where systemd-analyze is installed).
func TestHQUnit(t *testing.T) {
	unit := readFile(t, "rxedge-hq.service")
	for _, want := range []string{
		`ExecStart=/usr/bin/rxedge-hq "run" "--config" "${CREDENTIALS_DIRECTORY}/hq.yaml"`,
		"ConditionPathExists=/etc/rxedge/hq.yaml", "DynamicUser=yes", "LoadCredential=hq.yaml:/etc/rxedge/hq.yaml",
		"LoadCredential=hq:/etc/rxedge/hq.credentials",
		"StateDirectory=rxedge-hq", "StateDirectoryMode=0700", "UMask=0077", "NoNewPrivileges=yes", "ProtectSystem=strict",
		"PrivateTmp=yes", "PrivateDevices=yes", "PrivateUsers=yes", "ProtectHome=yes", "ProtectProc=invisible",
		"ProtectClock=yes", "ProtectHostname=yes", "ProtectKernelTunables=yes", "ProtectKernelModules=yes",
		"ProtectKernelLogs=yes", "ProtectControlGroups=yes", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
		"RestrictNamespaces=yes", "RestrictRealtime=yes", "RestrictSUIDSGID=yes", "LockPersonality=yes",
		"MemoryDenyWriteExecute=yes", "SystemCallArchitectures=native", "SystemCallFilter=@system-service",
		"CapabilityBoundingSet=\n", "Restart=always",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("rxedge-hq.service lacks %q", want)
		}
	}
	if strings.Contains(unit, "Environment=") {
		t.Error("rxedge-hq.service passes a secret in its environment")
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze here: the unit is verified by scripts/systemd-container.sh")
	}
	// The unit as installed, but for its binary, which is not here.
	dir := t.TempDir()
	text := strings.Replace(unit, "/usr/bin/rxedge-hq", "/bin/true", 1)
	path := filepath.Join(dir, "rxedge-hq.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify rxedge-hq.service: %v\n%s", err, out)
	}
}
