package disk

import "os"

// WriteFile writes b to path durably: into path.tmp first, fsynced, then
// renamed over path and the directory fsynced, so after a power cut path
// holds either its old content or all of b, never a part.
func WriteFile(path string, b []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return Rename(tmp, path)
}
