//go:build !windows

package disk

import (
	"os"

	"golang.org/x/sys/unix"
)

// OpenNoFollow opens path for reading without following a symbolic link
// at its last element (the open fails, with ELOOP on Linux), and without
// blocking: a FIFO or a device opens at once, to be told apart from a
// regular file by the descriptor's Stat. It never becomes the process's
// controlling terminal.
func OpenNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
}
