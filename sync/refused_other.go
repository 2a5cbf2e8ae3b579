//go:build !windows

package sync

import "syscall"

// errRefused is the error number of a refused TCP connection.
var errRefused error = syscall.ECONNREFUSED
