package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// listenNotify is a stand-in for systemd's notify socket.
func listenNotify(t *testing.T) (*net.UnixConn, string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("sd_notify is a systemd protocol")
	}
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, path
}

func readDatagram(t *testing.T, c *net.UnixConn, within time.Duration) (string, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	b := make([]byte, 512)
	n, err := c.Read(b)
	return string(b[:n]), err
}

func TestNotifierFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want time.Duration
	}{
		{"no watchdog", map[string]string{"NOTIFY_SOCKET": "/run/x"}, 0},
		{"watchdog for us", map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, 30 * time.Second},
		{"watchdog for anyone", map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000"}, 30 * time.Second},
		{"watchdog for another process", map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"}, 0},
		{"bad value", map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "soon"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := notifierFromEnv(func(k string) string { return tc.env[k] }, 42)
			if n.watchdog != tc.want || n.socket != "/run/x" {
				t.Errorf("got %+v, want watchdog %s on /run/x", n, tc.want)
			}
		})
	}
}

func TestNotifySendsReady(t *testing.T) {
	c, path := listenNotify(t)
	if err := (notifier{socket: path}).send("READY=1"); err != nil {
		t.Fatal(err)
	}
	if got, err := readDatagram(t, c, 5*time.Second); err != nil || got != "READY=1" {
		t.Errorf("got %q, %v; want READY=1", got, err)
	}
	if err := (notifier{}).send("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v, want nil", err)
	}
}

// TestWatchdogPingsOnlyWhileAlive: a failing liveness check sends no ping,
// so systemd restarts the agent.
func TestWatchdogPingsOnlyWhileAlive(t *testing.T) {
	c, path := listenNotify(t)
	n := notifier{socket: path, watchdog: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	var healthy atomic.Bool
	healthy.Store(true)
	checks := make(chan bool, 100) // what each check answered
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.runWatchdog(ctx, func(context.Context) error {
			ok := healthy.Load()
			checks <- ok
			if !ok {
				return errors.New("stuck")
			}
			return nil
		}, slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-done }()
	if got, err := readDatagram(t, c, 5*time.Second); err != nil || got != "WATCHDOG=1" {
		t.Fatalf("healthy: got %q, %v; want WATCHDOG=1", got, err)
	}
	healthy.Store(false)
	// The loop is sequential (check, ping, wait): once a failed check is
	// seen, every ping of an earlier check has been sent. Drain those, then
	// see another failed check pass without a ping.
	for <-checks {
	}
	for {
		c.SetReadDeadline(time.Now())
		if _, err := c.Read(make([]byte, 64)); err != nil {
			break
		}
	}
	<-checks
	if got, err := readDatagram(t, c, 20*time.Millisecond); err == nil {
		t.Errorf("failing check: got %q, want no ping", got)
	}
}
