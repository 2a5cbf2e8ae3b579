//go:build !unix

package logging

import "os"

// IsJournal reports whether f is journald's stream: never here (the
// Windows service logs to the event log; see installer.EventLogHandler).
func IsJournal(f *os.File) bool { return false }
