//go:build !windows

package asap

import "os"

// rename moves src to dst and makes the move durable: both directories
// are fsynced, so after a power cut the file is in one of them, and in
// dst once rename returned.
func rename(src, dst string) error {
	if err := os.Rename(src, dst); err != nil {
		return err
	}
	if err := syncDir(dirOf(dst)); err != nil {
		return err
	}
	return syncDir(dirOf(src))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
