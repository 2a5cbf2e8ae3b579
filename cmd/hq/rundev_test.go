//go:build unix

package main

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rxedge/agent/testkit/agentbin"
)

// TestRunDev runs the built hq run --dev: it starts its hub, prints the
// console's one-time login link on loopback, and the console it serves
// answers the fleet page to the session the link opens; SIGTERM ends it
// with exit 0.
func TestRunDev(t *testing.T) {
	cmd := exec.Command(agentbin.BuildHQ(t), "run", "--dev", "--console-listen", "127.0.0.1:0", "--store-dir", t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	done := make(chan struct{})
	links := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if link, ok := strings.CutPrefix(sc.Text(), "console: "); ok {
				links <- link
			}
		}
		io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done // Wait has copied the last of the log
		if t.Failed() {
			t.Logf("hq run --dev's log:\n%s", logs.String())
		}
	})
	var link string
	select {
	case link = <-links:
	case err := <-exited:
		t.Fatalf("hq run --dev ended before printing its login link: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("hq run --dev printed no login link within 2 minutes")
	}
	if !strings.HasPrefix(link, "http://127.0.0.1:") || !strings.Contains(link, "/login?t=") {
		t.Fatalf("login link %q: want one on loopback", link)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Jar: jar, Timeout: time.Minute}
	resp, err := client.Get(link) // the link logs in and goes to /fleet
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/fleet" {
		t.Fatalf("the login link led to %s: %d\n%s", resp.Request.URL, resp.StatusCode, body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Errorf("hq run --dev after SIGTERM: exit %d, want 0", ee.ExitCode())
		} else if err != nil {
			t.Errorf("hq run --dev after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("hq run --dev did not end within a minute of SIGTERM")
	}
}
