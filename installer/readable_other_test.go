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
