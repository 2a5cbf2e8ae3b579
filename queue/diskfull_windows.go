package queue

import (
	"errors"
	"strings"

	"golang.org/x/sys/windows"
)

var fullErrnos = []windows.Errno{windows.ERROR_DISK_FULL, windows.ERROR_HANDLE_DISK_FULL}

// isDiskFull reports whether err means the file could not grow (see the
// Unix version for why the text is checked too).
func isDiskFull(err error) bool {
	for _, e := range fullErrnos {
		if errors.Is(err, e) || strings.Contains(err.Error(), e.Error()) {
			return true
		}
	}
	return false
}
