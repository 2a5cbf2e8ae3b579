package disk

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/windows"
)

// OpenNoFollow opens path for reading without following a symbolic link
// or other reparse point (FILE_FLAG_OPEN_REPARSE_POINT opens the link
// itself, which the descriptor's Stat then shows as not a regular file).
// Others may read, write, rename or delete the file while it is open
// (FILE_SHARE_DELETE), so the caller can move it before closing it.
func OpenNoFollow(path string) (*os.File, error) {
	p, err := windows.UTF16PtrFromString(longPath(path))
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE, nil,
		windows.OPEN_EXISTING, windows.FILE_ATTRIBUTE_NORMAL|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(h), path), nil
}

// longPath is path in the \\?\ form when it is absolute and as long as
// MAX_PATH allows, as package os does for its own calls: a name at the
// file system's limit in a folder easily makes a path longer than that.
func longPath(path string) string {
	if len(path) < 248 || !filepath.IsAbs(path) || strings.HasPrefix(path, `\\?\`) {
		return path
	}
	path = filepath.Clean(path)
	if strings.HasPrefix(path, `\\`) {
		return `\\?\UNC\` + path[2:]
	}
	return `\\?\` + path
}
