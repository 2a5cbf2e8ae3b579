//go:build !windows

package installer

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"
)

func readableByOthers(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Perm()&0o004 != 0
}

func serviceCanRead(path, dataDir string) (string, bool, error) {
	dfi, err := os.Stat(dataDir)
	if err != nil {
		return "", false, err
	}
	kfi, err := os.Stat(path)
	if err != nil {
		return "", false, err
	}
	d, ok1 := dfi.Sys().(*syscall.Stat_t)
	k, ok2 := kfi.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 {
		return "", false, fmt.Errorf("the owners of %s and %s cannot be read here", dataDir, path)
	}
	uid := strconv.FormatUint(uint64(d.Uid), 10)
	account := "uid " + uid
	u, lerr := user.LookupId(uid)
	if lerr == nil {
		account = u.Username
	}
	mode := kfi.Mode().Perm()
	switch {
	case d.Uid == 0:
		return account, true, nil
	case k.Uid == d.Uid:
		return account, mode&0o400 != 0, nil
	}
	gid := strconv.FormatUint(uint64(k.Gid), 10)
	member := k.Gid == d.Gid
	if lerr == nil {
		if gids, err := u.GroupIds(); err == nil {
			member = member || slices.Contains(gids, gid) || u.Gid == gid
		}
	}
	if member {
		return account, mode&0o040 != 0, nil
	}
	return account, mode&0o004 != 0, nil
}
