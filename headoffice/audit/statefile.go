package audit

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rxedge/agent/internal/disk"
)

// errStateTooLarge is readStateFile's refusal of a file over its bound:
// it is read no further.
var errStateTooLarge = errors.New("over its bound")

// readStateFile reads the state file at path, refusing one over max
// bytes (errStateTooLarge) before reading it whole; missing is true when
// there is none. The witness's state and the verifier's are read so.
func readStateFile(path string, max int64) (b []byte, missing bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		return nil, false, fmt.Errorf("%d bytes: %w", fi.Size(), errStateTooLarge)
	}
	b, err = io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(b)) > max {
		return nil, false, errStateTooLarge
	}
	return b, false, nil
}

// writeStateFile replaces the state file at path with b atomically: a
// temporary file, synced, renamed over it, and the folder synced, so a
// crash at any point leaves the old state or the new one, whole.
func writeStateFile(path string, b []byte) error {
	return disk.WriteFile(path, b, 0o600)
}
