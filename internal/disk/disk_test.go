package disk

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFreeOfAFile: status asks for the space free around the data file, so
// Free must answer for a file as for its directory (on Windows it did not,
// and status showed 0 B free).
func TestFreeOfAFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.db")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, file} {
		free, err := Free(p)
		if err != nil || free == 0 {
			t.Errorf("Free(%s) = %d, %v; want the free space of its volume", p, free, err)
		}
	}
}
