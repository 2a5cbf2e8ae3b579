package disk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular and ErrTooLarge are what ReadRegular refuses.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("larger than the limit")
)

// ReadRegular reads the regular file at path, at most max bytes: a FIFO, a
// device or a directory in its place is refused at once (it is opened
// without blocking, so a FIFO does not hold the caller waiting for a
// writer), and a larger file is refused before more than max+1 bytes are
// read. Settings and secret files are read with it.
func ReadRegular(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w of %d bytes", path, ErrTooLarge, max)
	}
	return b, nil
}
