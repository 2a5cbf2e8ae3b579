//go:build !windows

package installer

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadableByOthers(t *testing.T) {
	dir := t.TempDir()
	open, closed := filepath.Join(dir, "open"), filepath.Join(dir, "closed")
	os.WriteFile(open, nil, 0o644)
	os.WriteFile(closed, nil, 0o640)
	os.Chmod(open, 0o644) // whatever the umask
	got := ReadableByOthers(open, closed, filepath.Join(dir, "missing"), "")
	if len(got) != 1 || got[0] != open {
		t.Errorf("got %v, want [%s]", got, open)
	}
}

// TestServiceCanRead: the service's account is the data directory's
// owner; a key file it owns with 0600 is readable by it, one root owns
// with 0600 is not, one in its group with 0640 is. Run as root (it
// changes owners); as another user only the owner's cases are checked.
func TestServiceCanRead(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "ledger.key")
	os.WriteFile(key, []byte("k"), 0o600)
	os.Chmod(key, 0o600)
	if acct, ok, err := ServiceCanRead(key, dir); err != nil || !ok || acct == "" {
		t.Fatalf("own key: %q %v %v", acct, ok, err)
	}
	os.Chmod(key, 0o200)
	if os.Getuid() != 0 {
		if _, ok, _ := ServiceCanRead(key, dir); ok {
			t.Fatal("a key without the owner's read bit is readable")
		}
		return
	}
	// The service is nobody (65534:65534), as install makes rxedge own
	// the data directory.
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		uid, gid int
		mode     os.FileMode
		want     bool
	}{
		{"the service's own, 0600", 65534, 65534, 0o600, true},
		{"the service's own, no read bit", 65534, 65534, 0o200, false},
		{"root's, 0600", 0, 0, 0o600, false},
		{"root's, group the service's, 0640", 0, 65534, 0o640, true},
		{"root's, group the service's, 0600", 0, 65534, 0o600, false},
		{"root's, readable by all", 0, 0, 0o644, true},
	} {
		os.Chown(key, tc.uid, tc.gid)
		os.Chmod(key, tc.mode)
		acct, ok, err := ServiceCanRead(key, dir)
		if err != nil || ok != tc.want || acct == "" || acct == "root" {
			t.Errorf("%s: %q %v %v, want %v", tc.name, acct, ok, err, tc.want)
		}
	}
	if _, _, err := ServiceCanRead(filepath.Join(dir, "missing"), dir); err == nil {
		t.Error("a missing file: no error")
	}
}
