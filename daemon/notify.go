package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"time"
)

// notifier speaks systemd's readiness protocol (sd_notify): one datagram
// per state change on the socket named by $NOTIFY_SOCKET. It is a no-op
// when the agent does not run under a service manager that asked for it.
type notifier struct {
	socket   string        // "" = nobody listens
	watchdog time.Duration // 0 = no watchdog
}

// notifierFromEnv reads $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID as
// systemd sets them for a Type=notify service with WatchdogSec.
func notifierFromEnv(getenv func(string) string, pid int) notifier {
	n := notifier{socket: getenv("NOTIFY_SOCKET")}
	if usec, err := strconv.ParseInt(getenv("WATCHDOG_USEC"), 10, 64); err == nil && usec > 0 {
		if p := getenv("WATCHDOG_PID"); p == "" || p == strconv.Itoa(pid) {
			n.watchdog = time.Duration(usec) * time.Microsecond
		}
	}
	return n
}

// send writes state (e.g. "READY=1") to the notify socket.
func (n notifier) send(state string) error {
	if n.socket == "" {
		return nil
	}
	name := n.socket
	if name[0] == '@' { // an abstract socket
		name = "\x00" + name[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}

// errNotAlive is what watchdog logs when the agent fails its own check.
var errNotAlive = errors.New("the agent did not answer its liveness check")

// runWatchdog sends WATCHDOG=1 every half watchdog interval while alive
// answers within that half interval, until ctx ends. When alive fails or
// hangs, no ping goes out, and the service manager kills and restarts the
// agent once the interval has passed without one.
func (n notifier) runWatchdog(ctx context.Context, alive func(context.Context) error, log *slog.Logger) {
	if n.watchdog <= 0 || n.socket == "" {
		return
	}
	every := n.watchdog / 2
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, every)
		err := alive(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			if err := n.send("WATCHDOG=1"); err != nil {
				log.Warn("WATCHDOG_NOTIFY_FAILED", "error", err.Error())
			}
		} else {
			log.Error("WATCHDOG_CHECK_FAILED", "error", errors.Join(errNotAlive, err).Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
