//go:build !windows

package queue

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// ownLikeDir gives a data file the process just created the owner and group
// of its directory. A file created by an administrator's command (`sudo
// agent enqueue` before the service ever ran) must stay usable by the
// service's own user, who owns the data directory. Without the privilege
// to change owners the file keeps the process's, which is then the
// directory owner's too or no concern.
func ownLikeDir(path string) error {
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() {
		return nil
	}
	if err := os.Lchown(path, int(st.Uid), int(st.Gid)); err != nil && !errors.Is(err, syscall.EPERM) {
		return err
	}
	return nil
}
