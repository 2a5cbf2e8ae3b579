package secret

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFile: the one line without its end; an empty file, one of more
// lines, a missing file and a file too large are errors that never carry
// the content.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		content, want string
		err           error
	}{
		{"S3cret\n", "S3cret", nil},
		{"S3cret\r\n", "S3cret", nil},
		{"S3cret", "S3cret", nil},
		{"S3cret\nsecond line\n", "", ErrLines},
		{"S3cret\n\n", "", ErrLines},
		{"\nS3cret\n", "", ErrLines},
		{"\n", "", ErrEmpty},
		{"", "", ErrEmpty},
	} {
		p := filepath.Join(dir, "pw")
		if err := os.WriteFile(p, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(p)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("%q: got %q, %v; want %q, %v", c.content, got, err, c.want, c.err)
		}
		if err != nil && strings.Contains(err.Error(), "S3cret") {
			t.Errorf("%q: the error carries the content: %v", c.content, err)
		}
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte("S3cret"+strings.Repeat("x", MaxFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(big); err == nil || strings.Contains(err.Error(), "S3cret") {
		t.Errorf("a file over MaxFile: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}
