//go:build !windows

package disk

import (
	"os"
	"path/filepath"
)

// Rename moves src to dst (replacing it) and makes the move durable: both
// directories are fsynced, so after a power cut the file is in one of
// them, and in dst once Rename returned.
func Rename(src, dst string) error {
	if err := os.Rename(src, dst); err != nil {
		return err
	}
	if err := SyncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	if filepath.Dir(src) == filepath.Dir(dst) {
		return nil
	}
	return SyncDir(filepath.Dir(src))
}
