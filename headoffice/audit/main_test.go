package audit_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/hub"
)

// envHubDir makes the test binary a hub of its own (TestMain): a
// nats-server in another process, so that what a test measures of its
// own heap is the reader's alone.
const envHubDir = "RXEDGE_AUDIT_TEST_HUB_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(envHubDir); dir != "" {
		os.Exit(serveHub(dir))
	}
	if args := os.Getenv(envPassChild); args != "" {
		os.Exit(passChild(args))
	}
	os.Exit(m.Run())
}

// serveHub runs a hub with central's streams on a free loopback port,
// prints its URL and serves until its standard input closes. It does not
// fsync every write: what is measured against it is the reader's memory,
// and an fsync for each of the hundred thousand records a test writes
// would take minutes on a busy machine.
func serveHub(dir string) int {
	h, err := hub.Start(hub.Options{Listen: "127.0.0.1:0", StoreDir: dir, Provision: streams.Provision, NoSync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "hub:", err)
		return 1
	}
	fmt.Println(h.URL())
	_, _ = io.Copy(io.Discard, os.Stdin)
	h.Shutdown()
	return 0
}

// startHubProcess starts the test binary as a hub in a process of its
// own (a real nats-server with JetStream on disk) and returns its URL; it
// is stopped when the test ends.
func startHubProcess(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envHubDir+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case url := <-line:
		if !strings.HasPrefix(url, "nats://") {
			t.Fatalf("the hub process printed %q, not its URL", url)
		}
		return url
	case <-time.After(time.Minute):
		t.Fatal("the hub process did not print its URL in a minute")
	}
	return ""
}
