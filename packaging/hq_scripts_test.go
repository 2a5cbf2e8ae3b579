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

// TestHQScripts: rxedge-hq's package never enables or starts the sink;
// an upgrade restarts a running one on the new binary, a removal stops
// and disables it, an upgrade's preremove leaves it running.
func TestHQScripts(t *testing.T) {
	for _, args := range [][]string{{"configure", ""}, {"configure", "1.4.0"}, {"1"}, {"2"}} {
		calls := runScript(t, "hq-postinstall.sh", args...)
		if !strings.Contains(calls, "systemctl daemon-reload") || !strings.Contains(calls, "systemctl try-restart rxedge-sink.service") ||
			strings.Contains(calls, "enable") || strings.Contains(calls, "systemctl start") || strings.Contains(calls, "systemctl restart") {
			t.Errorf("postinstall %v:\n%s", args, calls)
		}
	}
	for _, tc := range []struct {
		args    []string
		disable bool
	}{{[]string{"remove"}, true}, {[]string{"0"}, true}, {[]string{"upgrade", "1.4.1"}, false}, {[]string{"1"}, false}} {
		calls := runScript(t, "hq-preremove.sh", tc.args...)
		if got := strings.Contains(calls, "systemctl disable --now rxedge-sink.service"); got != tc.disable || strings.Contains(calls, "rxedge-agent") {
			t.Errorf("preremove %v: disable %v, want %v\n%s", tc.args, got, tc.disable, calls)
		}
	}
}

// TestHQPackageHoldsTheSink: the sink's unit and files ship in
// rxedge-hq's package, running rxedge-hq, and no longer in the store's.
func TestHQPackageHoldsTheSink(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	agent, hq := read("nfpm.yaml"), read("nfpm-hq.yaml")
	for _, f := range []string{"packaging/rxedge-sink.service", "configs/sink.yaml", "configs/postgres/sink-grants.sql"} {
		if strings.Contains(agent, f) || !strings.Contains(hq, "src: "+f) {
			t.Errorf("%s: in the store's package %v, in head office's %v; want head office's only", f, strings.Contains(agent, f), strings.Contains(hq, f))
		}
	}
	if !strings.Contains(hq, "dst: /usr/bin/rxedge-hq") || !strings.Contains(read("rxedge-sink.service"), "ExecStart=/usr/bin/rxedge-hq ") {
		t.Error("rxedge-hq's package does not install /usr/bin/rxedge-hq, or the sink's unit runs another binary")
	}
}
