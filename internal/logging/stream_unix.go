//go:build unix

package logging

import (
	"os"

	"golang.org/x/sys/unix"
)

// IsJournal reports whether f is journald's stream for this process.
func IsJournal(f *os.File) bool {
	env := os.Getenv("JOURNAL_STREAM")
	if env == "" {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return JournalStream(env, uint64(st.Dev), uint64(st.Ino))
}
