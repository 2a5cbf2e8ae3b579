//go:build !windows

package control

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// Endpoint returns the control channel of the agent whose data directory
// is dataDir: the socket file agent.sock in it.
func Endpoint(dataDir string) string { return filepath.Join(dataDir, "agent.sock") }

// Listen listens on the control channel at endpoint (from Endpoint), a
// socket readable and writable only by the agent's own user (and root).
// The caller holds the data file's lock, so a socket file left there by an
// agent that died is stale and is replaced.
func Listen(endpoint string) (net.Listener, error) {
	os.Remove(endpoint)
	ln, err := net.Listen("unix", endpoint)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", endpoint, err)
	}
	if err := os.Chmod(endpoint, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: %w", endpoint, err)
	}
	return ln, nil
}

// dialEndpoint connects to the control channel at endpoint.
func dialEndpoint(ctx context.Context, endpoint string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", endpoint)
}
