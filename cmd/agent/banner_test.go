package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/testkit/agentbin"
)

// TestInvocation: the banner's commands start as this agent was started:
// `go run ./cmd/agent` for what `go run` built, the name for a binary
// found on the PATH, the path as given otherwise.
func TestInvocation(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("POSIX paths and quoting")
	}
	onPath := t.TempDir()
	bin := filepath.Join(onPath, "rxedge-agent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", onPath)
	other := filepath.Join(t.TempDir(), "my agent")
	for _, tc := range []struct{ arg0, want string }{
		{"/tmp/go-build1234/b001/exe/agent", "go run ./cmd/agent"},
		{"rxedge-agent", "rxedge-agent"},
		{bin, "rxedge-agent"},
		{"./agent", "./agent"},
		{other, "'" + other + "'"},
	} {
		if got := invocation(tc.arg0, exec.LookPath); got != tc.want {
			t.Errorf("invocation(%q) = %q, want %q", tc.arg0, got, tc.want)
		}
	}
}

// TestDevBannerCommandsRun: the trial's banner lists its HL7 listener and
// drop folder; its status command, run by a shell as printed, reaches the
// running trial agent, and its doctor command checks both intakes.
func TestDevBannerCommandsRun(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("runs the printed command with sh")
	}
	bin := agentbin.Build(t)
	work := t.TempDir()
	asap := filepath.Join(work, "asap")
	formulary := filepath.Join(work, "formulary.csv")
	if err := os.WriteFile(formulary, []byte("00406-0552-62,CII\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hl7Addr := agentbin.FreeAddr(t)
	cmd := exec.Command(bin, "run", "--dev", "--data-dir", filepath.Join(work, "dev"), "--ingest", "127.0.0.1:0",
		"--dev-hub", agentbin.FreeAddr(t), "--hl7-listen", hl7Addr, "--asap-dir", asap, "--log-level", "error")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "RXEDGE_INTAKE_FORMULARY="+formulary)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	banner := readBanner(t, stdout)
	text := strings.Join(banner, "\n")
	for _, want := range []string{"HL7 v2 (MLLP):           " + hl7Addr, "ASAP drop folder:        " + asap, "formulary:               " + formulary} {
		if !strings.Contains(text, want) {
			t.Errorf("the banner lacks %q:\n%s", want, text)
		}
	}
	commands := map[string]string{}
	for _, l := range banner {
		for _, name := range []string{"status", "doctor"} {
			if strings.Contains(l, " "+name+" --") {
				commands[name] = strings.TrimSpace(l)
			}
		}
	}
	if len(commands) != 2 {
		t.Fatalf("the banner lacks a status or a doctor command:\n%s", text)
	}
	// Runnable from anywhere, not only from where the agent started.
	run := func(line string) (string, error) {
		sh := exec.Command("sh", "-c", line)
		sh.Dir = t.TempDir()
		out, err := sh.CombinedOutput()
		return string(out), err
	}
	out, err := run(commands["status"])
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 3) || !strings.Contains(out, "DEV0001") {
		t.Errorf("%s: %v\n%s", commands["status"], err, out)
	}
	out, err = run(commands["doctor"])
	for _, want := range []string{"ok   hl7 listener", "accepting connections on " + hl7Addr, "ok   asap folder"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s (%v) lacks %q:\n%s", commands["doctor"], err, want, out)
		}
	}
}

// readBanner reads the trial's banner from stdout, up to its last line.
func readBanner(t *testing.T, stdout io.Reader) []string {
	t.Helper()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var banner []string
	deadline := time.After(2 * time.Minute)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the agent ended before its banner's last line:\n%s", strings.Join(banner, "\n"))
			}
			banner = append(banner, l)
			done = strings.HasPrefix(l, "Ctrl-C")
		case <-deadline:
			t.Fatalf("no banner within 2 minutes; so far:\n%s", strings.Join(banner, "\n"))
		}
	}
	return banner
}
