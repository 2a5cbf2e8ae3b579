//go:build !windows

package disk

import "golang.org/x/sys/unix"

// Free is the space available to an unprivileged user on the file system
// holding path, in bytes.
func Free(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
