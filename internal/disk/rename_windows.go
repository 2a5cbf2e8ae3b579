package disk

import "golang.org/x/sys/windows"

// Rename moves src to dst (replacing it) with MOVEFILE_WRITE_THROUGH: it
// returns only once the move is on disk.
func Rename(src, dst string) error {
	from, err := windows.UTF16PtrFromString(src)
	if err != nil {
		return err
	}
	to, err := windows.UTF16PtrFromString(dst)
	if err != nil {
		return err
	}
	return windows.MoveFileEx(from, to, windows.MOVEFILE_WRITE_THROUGH|windows.MOVEFILE_REPLACE_EXISTING)
}
