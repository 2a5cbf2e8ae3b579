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

// TestWriteFileThroughNoLink: a link left under the temporary file's name
// (in a folder others may write to) is replaced, and what it points to is
// not written.
func TestWriteFileThroughNoLink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "report.json")
	if err := os.Symlink(victim, path+".tmp"); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	if err := WriteFile(path, []byte("report"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the link's target holds %q, want it untouched", b)
	}
	if b, _ := os.ReadFile(path); string(b) != "report" {
		t.Errorf("the file holds %q", b)
	}
}
