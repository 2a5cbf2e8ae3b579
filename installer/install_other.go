//go:build !linux && !windows

package installer

import (
	"context"

	"github.com/kardianos/service"
)

// osHost refuses: the agent installs as a service on linux and windows only.
type osHost struct{}

func (osHost) preflight(*Plan) error                                { return ErrUnsupported }
func (osHost) ensureUser(context.Context, *Plan) (bool, error)      { return false, ErrUnsupported }
func (osHost) applyPerm(string, Perm) error                         { return ErrUnsupported }
func (osHost) register(context.Context, *Plan) error                { return ErrUnsupported }
func supported() error                                              { return ErrUnsupported }
func isAdmin() bool                                                 { return true }
func stopService(context.Context, service.Service, string) error    { return ErrUnsupported }
func restartService(context.Context, service.Service, string) error { return ErrUnsupported }
func afterUninstall(string)                                         {}
func installedArgs(string) ([]string, error)                        { return nil, ErrUnsupported }
func FindPackagedUnit() string                                      { return "" }
