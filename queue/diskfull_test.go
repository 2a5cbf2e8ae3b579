//go:build !windows

package queue

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestDiskFullText pins how bbolt reports a file that cannot grow: it
// formats the errno with %s, so only the text is left to recognise.
func TestDiskFullText(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("file resize error: %s", syscall.EFBIG),
		fmt.Errorf("file resize error: %s", syscall.ENOSPC),
		fmt.Errorf("write: %w", syscall.ENOSPC),
		fmt.Errorf("commit: %w", fmt.Errorf("sync: %w", syscall.EDQUOT)),
	} {
		if got := classify(err); !errors.Is(got, ErrDiskFull) {
			t.Errorf("classify(%v) = %v, want ErrDiskFull", err, got)
		}
	}
	if got := classify(errors.New("bolt: database not open")); errors.Is(got, ErrDiskFull) {
		t.Errorf("an unrelated error classified as disk full")
	}
}
