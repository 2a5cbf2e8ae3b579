//go:build !windows

package installer

import "os"

// runService leaves p to serve: under systemd, kardianos's Run would do the
// same (start, wait for SIGTERM, stop) but could not end when the agent
// stops on its own.
func runService(string, *program) (bool, error) { return false, nil }

// UnderServiceManager reports whether systemd started this process as a
// service: its parent is PID 1 and systemd gave it an invocation id.
func UnderServiceManager() bool {
	return os.Getppid() == 1 && os.Getenv("INVOCATION_ID") != ""
}
