//go:build !windows

package installer

import "os"

func readableByOthers(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Perm()&0o004 != 0
}
