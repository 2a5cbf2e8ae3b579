//go:build !windows

package queue

import (
	"errors"
	"syscall"
)

// isDiskFull reports whether err means the file could not grow: no space
// left, or over a file-size limit (RLIMIT_FSIZE, quota).
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EFBIG) || errors.Is(err, syscall.EDQUOT)
}
