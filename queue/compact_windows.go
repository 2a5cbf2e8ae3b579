package queue

import "os"

// matchOwner gives the file at path the permission bits of like. Access on
// Windows is governed by the ACL the file inherits from the data
// directory, the same for the new file as for the old.
func matchOwner(path string, like os.FileInfo) error {
	return os.Chmod(path, like.Mode().Perm())
}
