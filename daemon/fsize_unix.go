//go:build !windows

package daemon

import (
	"os/signal"
	"syscall"
)

// ignoreFileSizeLimit makes writes beyond a file-size limit (RLIMIT_FSIZE,
// quotas) fail with EFBIG, which the queue reports as a full disk (HTTP
// 507), instead of killing the process with SIGXFSZ.
func ignoreFileSizeLimit() { signal.Ignore(syscall.SIGXFSZ) }
