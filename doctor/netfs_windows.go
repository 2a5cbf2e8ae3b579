package doctor

import (
	"path/filepath"
	"strings"

	"golang.org/x/sys/windows"
)

// networkShare reports whether path is on a network drive or a UNC share.
func networkShare(path string) (bool, string) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, ""
	}
	if strings.HasPrefix(abs, `\\`) {
		return true, "UNC share"
	}
	root, err := windows.UTF16PtrFromString(filepath.VolumeName(abs) + `\`)
	if err != nil {
		return false, ""
	}
	if windows.GetDriveType(root) == windows.DRIVE_REMOTE {
		return true, "network drive"
	}
	return false, ""
}
