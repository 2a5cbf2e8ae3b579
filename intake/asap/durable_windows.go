//go:build windows

package asap

import "golang.org/x/sys/windows"

// rename moves src to dst with MOVEFILE_WRITE_THROUGH: it returns only
// once the move is on disk.
func rename(src, dst string) error {
	from, err := windows.UTF16PtrFromString(src)
	if err != nil {
		return err
	}
	to, err := windows.UTF16PtrFromString(dst)
	if err != nil {
		return err
	}
	return windows.MoveFileEx(from, to, windows.MOVEFILE_WRITE_THROUGH)
}

// syncDir is a no-op: NTFS journals directory changes, and the moves
// above write through.
func syncDir(string) error { return nil }
