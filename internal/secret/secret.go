// Package secret reads the product's password and token files, in one
// way for every command of both binaries: the file holds one line, which
// is the secret without its line end; a file of more lines is refused
// (which line was meant is not for the reader to guess). A file that is not a regular file (a FIFO, a device) or is
// larger than MaxFile is refused before anything is read, and an error
// names the file, never what it holds.
package secret

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rxedge/agent/internal/disk"
)

// MaxFile is the largest password or token file read (a password is a
// line; a larger file is not one).
const MaxFile = 64 << 10

// ErrEmpty and ErrLines are a file that holds no secret, or more than a
// line.
var (
	ErrEmpty = errors.New("it is empty")
	ErrLines = errors.New("it holds more than one line")
)

// ReadFile returns the one line of the file at path, without its line end
// ("\n" or "\r\n").
func ReadFile(path string) (string, error) {
	b, err := disk.ReadRegular(path, MaxFile)
	switch {
	case errors.Is(err, disk.ErrTooLarge):
		return "", fmt.Errorf("read the secret file %s: larger than %d bytes, which no password is", path, MaxFile)
	case errors.Is(err, disk.ErrNotRegular):
		return "", fmt.Errorf("read the secret file %s: not a regular file", path)
	case err != nil:
		return "", fmt.Errorf("read the secret file: %w", err)
	}
	line, rest, _ := strings.Cut(string(b), "\n")
	switch line = strings.TrimSuffix(line, "\r"); {
	case rest != "":
		return "", fmt.Errorf("read the secret file %s: %w", path, ErrLines)
	case line == "":
		return "", fmt.Errorf("read the secret file %s: %w", path, ErrEmpty)
	}
	return line, nil
}
