//go:build !windows

package queue

import (
	"errors"
	"os"
	"syscall"
)

// matchOwner gives the file at path the permission bits, owner and group
// of like. Changing the owner needs privileges: when the process lacks
// them, the file keeps the process's own, which is then also like's.
func matchOwner(path string, like os.FileInfo) error {
	if err := os.Chmod(path, like.Mode().Perm()); err != nil {
		return err
	}
	st, ok := like.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if err := os.Lchown(path, int(st.Uid), int(st.Gid)); err != nil && !errors.Is(err, syscall.EPERM) {
		return err
	}
	return nil
}
