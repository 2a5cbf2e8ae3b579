package disk

import "golang.org/x/sys/unix"

// NameMax is the longest name, in bytes, the file system holding dir
// takes for an entry: its own limit (statfs f_namelen), never more than
// 255, which is also the limit where it cannot be asked.
func NameMax(dir string) int {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Namelen <= 0 {
		return defaultNameMax
	}
	return int(min(st.Namelen, defaultNameMax))
}
