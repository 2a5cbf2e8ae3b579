//go:build unix

package logging

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIsJournal: stderr is journald's stream only when JOURNAL_STREAM
// names its device and inode.
func TestIsJournal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		env  string
		want bool
	}{
		{"", false},
		{"garbage", false},
		{"1:2", false},
		{strings.Join([]string{itoa(uint64(st.Dev)), itoa(uint64(st.Ino))}, ":"), true},
		{strings.Join([]string{itoa(uint64(st.Dev)), itoa(uint64(st.Ino) + 1)}, ":"), false},
	} {
		t.Setenv("JOURNAL_STREAM", tt.env)
		if got := IsJournal(f); got != tt.want {
			t.Errorf("JOURNAL_STREAM=%q: got %v, want %v", tt.env, got, tt.want)
		}
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
