package control

import (
	"context"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"
)

// onWine reports whether this test runs under Wine, which does not check
// a pipe's DACL when a client opens it.
func onWine() bool {
	return windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
}

// tempDir is t.TempDir, whose removal Wine does not support.
func tempDir(t *testing.T) string {
	t.Helper()
	if !onWine() {
		return t.TempDir()
	}
	d, err := os.MkdirTemp("", "rxedge-pipe-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// primeOnWine opens the pipe once and closes it under Wine, which lets a
// client connect to the first instance of a pipe (go-winio creates it
// disconnected, and Windows keeps clients off it) where nobody reads. The
// next client then reaches an instance the listener serves.
func primeOnWine(t *testing.T, endpoint string) {
	t.Helper()
	if !onWine() {
		return
	}
	to := 5 * time.Second
	c, err := winio.DialPipe(endpoint, &to)
	if err != nil {
		t.Fatalf("prime the pipe under Wine: %v", err)
	}
	c.Close()
}

func serveHealth(t *testing.T, endpoint string) {
	t.Helper()
	ln, err := Listen(endpoint)
	if err != nil {
		t.Fatalf("Listen(%s): %v", endpoint, err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	})}
	done := make(chan struct{})
	go func() { hs.Serve(ln); close(done) }()
	t.Cleanup(func() { hs.Close(); <-done })
	primeOnWine(t, endpoint)
}

func TestControlPipe(t *testing.T) {
	dir := tempDir(t)
	endpoint := Endpoint(dir)
	if want := PipeName(dir); endpoint != want {
		t.Fatalf("Endpoint(%s) = %s, want %s", dir, endpoint, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := Dial(endpoint).Ping(ctx); !errors.Is(err, errNotRunning) {
		t.Fatalf("Ping before the agent listens: got %v, want %v", err, errNotRunning)
	}
	serveHealth(t, endpoint)
	c := Dial(endpoint)
	defer c.CloseIdleConnections()
	for i := range 3 { // several connections: the pipe's further instances
		if err := c.Ping(ctx); err != nil {
			t.Fatalf("Ping %d over the pipe: %v", i, err)
		}
		c.CloseIdleConnections()
	}

	// A second agent for the same directory, or a process squatting the
	// name, cannot take the pipe over. (Wine creates a further instance
	// where Windows refuses to create a first one twice.)
	if ln, err := Listen(endpoint); err == nil {
		ln.Close()
		if !onWine() {
			t.Fatal("a second Listen on the same pipe succeeded, want an error")
		}
	}
	// Another directory is another pipe.
	other := Endpoint(tempDir(t))
	if other == endpoint {
		t.Fatalf("two directories share the pipe %s", endpoint)
	}
	if err := Dial(other).Ping(ctx); !errors.Is(err, errNotRunning) {
		t.Fatalf("Ping on another directory's pipe: got %v, want %v", err, errNotRunning)
	}
}

// TestControlPipeRefusesOthers listens with the descriptor an agent running
// as another account would use (here: LocalSystem only, when this test is
// not LocalSystem) and checks that this process, though an administrator,
// is refused with ErrNoPermission: Windows enforces the pipe's DACL, so an
// account PipeSDDL does not name cannot reach the operator's routes.
func TestControlPipeRefusesOthers(t *testing.T) {
	if onWine() {
		t.Skip("Wine does not enforce a pipe's DACL; the Windows CI job runs this test")
	}
	sid, err := processSID()
	if err != nil {
		t.Fatal(err)
	}
	if sid == "S-1-5-18" {
		t.Skip("runs as LocalSystem, which the descriptor grants")
	}
	endpoint := Endpoint(tempDir(t))
	ln, err := winio.ListenPipe(endpoint, &winio.PipeConfig{SecurityDescriptor: "D:P(A;;GA;;;SY)"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Dial(endpoint).Ping(ctx); !errors.Is(err, ErrNoPermission) {
		t.Fatalf("Ping by an account the descriptor does not name: got %v, want %v", err, ErrNoPermission)
	}
}
