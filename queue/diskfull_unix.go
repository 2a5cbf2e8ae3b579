//go:build !windows

package queue

import (
	"errors"
	"strings"
	"syscall"
)

// fullErrnos mean the file could not grow: no space left, over a
// file-size limit (RLIMIT_FSIZE) or over a quota.
var fullErrnos = []syscall.Errno{syscall.ENOSPC, syscall.EFBIG, syscall.EDQUOT}

// isDiskFull reports whether err means the file could not grow. bbolt
// wraps the error of growing the file with %s ("file resize error: file
// too large"), so the errno survives only as text there; TestDiskFullText
// pins that.
func isDiskFull(err error) bool {
	for _, e := range fullErrnos {
		if errors.Is(err, e) || strings.Contains(err.Error(), e.Error()) {
			return true
		}
	}
	return false
}
