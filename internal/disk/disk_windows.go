package disk

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// Free is the space available to the caller on the volume holding path,
// in bytes. path may be a file: GetDiskFreeSpaceExW takes only a
// directory, so a file's own directory is asked.
func Free(path string) (uint64, error) {
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		path = filepath.Dir(path)
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return 0, err
	}
	var free, total, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &free, &total, &totalFree); err != nil {
		return 0, err
	}
	return free, nil
}
