package disk

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile writes b to path durably: into path.tmp first, fsynced, then
// renamed over path and the directory fsynced, so after a power cut path
// holds either its old content or all of b, never a part. When path.tmp
// would be a longer name than the file system takes, the temporary file
// is .NAMEHASH.tmp instead.
//
// The temporary file is created new (O_EXCL, which follows no link)
// after whatever had its name is removed: in a folder others may write
// to, a link put there under that name is replaced, never written
// through.
func WriteFile(path string, b []byte, perm os.FileMode) error {
	tmp := tmpName(path)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
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

// tmpName is where WriteFile writes path's content before it renames it.
func tmpName(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, TmpName(dir, base))
}

// TmpName is the name, in folder dir, of the temporary file WriteFile
// writes base's content to before it renames it: base.tmp, or
// .NAMEHASH.tmp when that is longer than the file system takes.
func TmpName(dir, base string) string {
	if len(base)+len(".tmp") <= NameMax(dir) {
		return base + ".tmp"
	}
	sum := sha256.Sum256([]byte(base))
	return "." + hex.EncodeToString(sum[:16]) + ".tmp"
}
