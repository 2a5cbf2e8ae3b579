//go:build !windows

package installer

// runService leaves p to serve: under systemd, kardianos's Run would do the
// same (start, wait for SIGTERM, stop) but could not end when the agent
// stops on its own.
func runService(string, *program) (bool, error) { return false, nil }
