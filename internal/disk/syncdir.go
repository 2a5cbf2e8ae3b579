package disk

import (
	"os"
	"runtime"
)

// SyncDir makes the entries of dir (a file created, renamed or removed in
// it) durable: an fsync of the directory itself, without which a power
// loss can take a file whose data was synced. Windows cannot fsync a
// directory; NTFS journals the entry, so it does nothing there.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
