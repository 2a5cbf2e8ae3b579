// Package agentbin builds the agent binary once per test process, for
// tests that run it as a child process (crash, SIGTERM, soak): they test
// the program an installation runs, not an in-process imitation.
package agentbin

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	stdsync "sync"
	"testing"
)

var (
	once  stdsync.Once
	path  string
	dir   string
	err   error
	out   []byte
	mutex stdsync.Mutex
)

// Build returns the path of a freshly built agent binary. The first call
// builds it; later calls in the same process reuse it.
func Build(tb testing.TB) string {
	tb.Helper()
	mutex.Lock()
	defer mutex.Unlock()
	once.Do(func() {
		dir, err = os.MkdirTemp("", "rxedge-agentbin-")
		if err != nil {
			return
		}
		name := "agent"
		if runtime.GOOS == "windows" {
			name += ".exe"
		}
		path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", path, "github.com/rxedge/agent/cmd/agent")
		out, err = cmd.CombinedOutput()
	})
	if err != nil {
		tb.Fatalf("building the agent: %v\n%s", err, out)
	}
	return path
}

// Cleanup removes the built binary; call it from TestMain after m.Run.
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// FreeAddr returns a loopback address whose port was free a moment ago,
// for the agent a test starts to listen on.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
