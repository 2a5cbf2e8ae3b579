package asap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestFit: names that fit are kept; longer ones are cut at a character,
// to the limit, and stay distinct.
func TestFit(t *testing.T) {
	if got := fit("short.asap", 20); got != "short.asap" {
		t.Errorf("fit kept %q as %q", "short.asap", got)
	}
	long := strings.Repeat("é", 200) + ".asap"
	seen := map[string]bool{}
	for _, name := range []string{long, long + ".1", long + ".2"} {
		got := fit(name, 243)
		if len(got) > 243 || !utf8.ValidString(got) || !strings.HasPrefix(got, "éé") || seen[got] {
			t.Errorf("fit(%d bytes) = %q (%d bytes): want at most 243 bytes of whole characters, distinct", len(name), got, len(got))
		}
		seen[got] = true
	}
	if got := fit(long, 5); len(got) != 5 {
		t.Errorf("fit to 5 bytes: %q", got)
	}
}

// TestFreeEnds: looking for a free name ends, whatever the folder answers:
// with a name, or with an error when the folder cannot be looked in. It
// used to take any answer but "not there" as "taken" and try the next
// name for ever.
func TestFreeEnds(t *testing.T) {
	path := t.TempDir()
	d, err := openDrop(path)
	must(t, err)
	defer d.Close()
	p, err := free(d, "a.asap", 0)
	if err != nil || p != "a.asap" {
		t.Fatalf("free: %q, %v", p, err)
	}
	must(t, os.WriteFile(filepath.Join(path, p), nil, 0o600))
	must(t, os.WriteFile(filepath.Join(path, p+".1"), nil, 0o600))
	if p, err = free(d, "a.asap", 0); err != nil || p != "a.asap.2" {
		t.Errorf("free with two copies: %q, %v; want a.asap.2", p, err)
	}
	// A name under a file: every look fails with ENOTDIR.
	if p, err = free(d, "a.asap/b.asap", 0); err == nil {
		t.Errorf("free under a file: %q, want an error", p)
	}
}
