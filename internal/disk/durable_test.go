package disk

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFile: the content replaces the old whole, with the mode asked
// for, and no temporary file is left beside it.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "marker")
	for _, want := range []string{"first\n", "second, longer\n", "3\n"} {
		if err := WriteFile(path, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file", len(entries))
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 && os.PathSeparator == '/' {
		t.Errorf("mode %v, want no access for others", fi.Mode().Perm())
	}
	if err := WriteFile(filepath.Join(dir, "no", "such"), []byte("x"), 0o600); err == nil {
		t.Error("a file in a missing directory was written")
	}
}
