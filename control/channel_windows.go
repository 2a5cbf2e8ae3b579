package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"
)

// Endpoint returns the control channel of the agent whose data directory
// is dataDir: its named pipe (PipeName of the absolute directory).
func Endpoint(dataDir string) string {
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	return PipeName(dataDir)
}

// Listen creates the control pipe at endpoint (from Endpoint) with the
// descriptor PipeSDDL gives for this process's account, and refuses
// remote clients. The pipe must not exist yet: a pipe of that name held
// by another process (an agent for the same directory, or a process
// squatting the name to read what the CLI sends) is an error, never
// shared.
func Listen(endpoint string) (net.Listener, error) {
	owner, err := processSID()
	if err != nil {
		return nil, fmt.Errorf("control pipe %s: read this process's account: %w", endpoint, err)
	}
	ln, err := winio.ListenPipe(endpoint, &winio.PipeConfig{
		SecurityDescriptor: PipeSDDL(owner),
		InputBufferSize:    64 << 10,
		OutputBufferSize:   64 << 10,
	})
	if errors.Is(err, windows.ERROR_ACCESS_DENIED) || errors.Is(err, windows.ERROR_PIPE_BUSY) || errors.Is(err, windows.ERROR_ALREADY_EXISTS) {
		return nil, fmt.Errorf("control pipe %s: another process already holds it: %w", endpoint, err)
	}
	if err != nil {
		return nil, fmt.Errorf("control pipe %s: %w", endpoint, err)
	}
	return ln, nil
}

// processSID is the SID of the account this process runs as.
func processSID() (string, error) {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return "", err
	}
	return u.User.Sid.String(), nil
}

// dialEndpoint connects to the control pipe at endpoint. A pipe that does
// not exist is reported like a refused socket connection, so callers
// treat both systems alike.
//
// The pipe's owner is checked before anything is sent (TrustedPipeOwner):
// a pipe another user created under the agent's name is refused.
func dialEndpoint(ctx context.Context, endpoint string) (net.Conn, error) {
	c, err := winio.DialPipeContext(ctx, endpoint)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: err}
	}
	if err := checkOwner(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("control pipe %s: %w", endpoint, err)
	}
	return c, nil
}

func checkOwner(c net.Conn) error {
	f, ok := c.(interface{ Fd() uintptr })
	if !ok {
		return fmt.Errorf("read the pipe's owner: no handle")
	}
	sd, err := windows.GetSecurityInfo(windows.Handle(f.Fd()), windows.SE_KERNEL_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("read the pipe's owner: %w", err)
	}
	owner, _, err := sd.Owner()
	if err != nil || owner == nil {
		return fmt.Errorf("read the pipe's owner: %v", err)
	}
	self, err := processSID()
	if err != nil {
		return fmt.Errorf("read this process's account: %w", err)
	}
	if !TrustedPipeOwner(owner.String(), self) {
		return fmt.Errorf("%w (owner %s)", ErrPipeSquatted, owner.String())
	}
	return nil
}
