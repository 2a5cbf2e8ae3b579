//go:build !windows

package queue

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestNewFileTakesItsDirectorysOwner: a data file an administrator's
// command creates must stay usable by the service's user, who owns the data
// directory.
func TestNewFileTakesItsDirectorysOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a file for another user")
	}
	dir := t.TempDir()
	const uid, gid = 65534, 65534 // nobody
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agent.db")
	q := openTest(t, path, newClock())
	q.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != uid || st.Gid != gid || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new data file owned by %d:%d mode %o, want %d:%d 0600", st.Uid, st.Gid, fi.Mode().Perm(), uid, gid)
	}
}
