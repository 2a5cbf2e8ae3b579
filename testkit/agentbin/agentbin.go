// Package agentbin builds the product's binaries once per test process,
// for tests that run them as child processes (crash, SIGTERM, soak, the
// head-office service killed mid-write): they test the programs an
// installation runs, not an in-process imitation. Build is the store's
// agent (cmd/agent), BuildHQ head office's hq (cmd/hq), BuildTagged
// either with build tags (the production agent, without its dev hub).
package agentbin

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	stdsync "sync"
	"testing"
)

// binary is one build: its result, made once.
type binary struct {
	once stdsync.Once
	path string
	err  error
	out  []byte
}

var (
	mutex  stdsync.Mutex
	dir    string
	dirErr error
	builds = map[string]*binary{}
)

// Build returns the path of a freshly built agent binary. The first call
// builds it; later calls in the same process reuse it.
func Build(tb testing.TB) string {
	tb.Helper()
	return BuildTagged(tb, "agent")
}

// BuildHQ returns the path of a freshly built head-office binary (hq),
// built once per process like Build's.
func BuildHQ(tb testing.TB) string {
	tb.Helper()
	return BuildTagged(tb, "hq")
}

// BuildTagged builds the command cmd/<name> with the build tags given, once
// per process for each name and set of tags, and returns its path.
func BuildTagged(tb testing.TB, name string, tags ...string) string {
	tb.Helper()
	mutex.Lock()
	defer mutex.Unlock()
	if dir == "" && dirErr == nil {
		dir, dirErr = os.MkdirTemp("", "rxedge-agentbin-")
	}
	if dirErr != nil {
		tb.Fatalf("building %s: %v", name, dirErr)
	}
	id := strings.Join(append([]string{name}, tags...), "+")
	b := builds[id]
	if b == nil {
		b = &binary{}
		builds[id] = b
	}
	b.once.Do(func() {
		exe := id
		if runtime.GOOS == "windows" {
			exe += ".exe"
		}
		b.path = filepath.Join(dir, exe)
		args := []string{"build", "-o", b.path}
		if len(tags) > 0 {
			args = append(args, "-tags", strings.Join(tags, ","))
		}
		cmd := exec.Command("go", append(args, "github.com/rxedge/agent/cmd/"+name)...)
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		tb.Fatalf("building %s: %v\n%s", id, b.err, b.out)
	}
	return b.path
}

// Cleanup removes the built binaries; call it from TestMain after m.Run.
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
