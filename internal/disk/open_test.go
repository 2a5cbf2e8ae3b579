package disk

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// TestOpenNoFollow: a regular file opens; a symbolic link is not
// followed.
func TestOpenNoFollow(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenNoFollow(file)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if n, _ := f.Read(b); n != 1 {
		t.Errorf("read %d bytes, want 1", n)
	}
	f.Close()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	f, err = OpenNoFollow(link)
	switch {
	case runtime.GOOS == "windows" && err == nil:
		// The link itself is open: its descriptor is no regular file's.
		if fi, err := f.Stat(); err != nil || fi.Mode().IsRegular() {
			t.Errorf("a link opened as %v, %v", fi, err)
		}
		f.Close()
	case runtime.GOOS != "windows" && !errors.Is(err, syscall.ELOOP):
		t.Errorf("a link opened: %v, want ELOOP", err)
	}
}

// TestNameMax: the folder's limit is a name it takes, and one byte more is
// refused (or, where the limit cannot be asked, 255).
func TestNameMax(t *testing.T) {
	dir := t.TempDir()
	n := NameMax(dir)
	if n <= 0 || n > 255 {
		t.Fatalf("NameMax %d", n)
	}
	if err := os.WriteFile(filepath.Join(dir, strings.Repeat("n", n)), nil, 0o600); err != nil {
		t.Errorf("a name of %d bytes: %v", n, err)
	}
	if runtime.GOOS == "linux" {
		if err := os.WriteFile(filepath.Join(dir, strings.Repeat("n", n+1)), nil, 0o600); err == nil {
			t.Errorf("a name of %d bytes was taken", n+1)
		}
	}
}

// TestWriteFileLongName: a file whose name is at the limit is written,
// though its temporary name would not fit.
func TestWriteFileLongName(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, strings.Repeat("w", NameMax(dir)))
	if err := WriteFile(path, []byte("long"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "long" {
		t.Errorf("read %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the folder holds %d entries, want only the file", len(ents))
	}
}
