package queue

import (
	"errors"

	"golang.org/x/sys/windows"
)

// isDiskFull reports whether err means the file could not grow.
func isDiskFull(err error) bool {
	return errors.Is(err, windows.ERROR_DISK_FULL) || errors.Is(err, windows.ERROR_HANDLE_DISK_FULL)
}
