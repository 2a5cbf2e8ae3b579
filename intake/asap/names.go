package asap

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"unicode/utf8"

	"github.com/rxedge/agent/internal/disk"
)

// maxCopies bounds the copies of one name free looks through: a name
// reused daily fills it in about 180 years.
const maxCopies = 1 << 16

// free is a path in dir for a file named name that no entry holds:
// dir/name, or dir/name.N for the first N not taken, so a file sent twice
// under one name keeps both copies. Every name it tries fits the file
// system with reserve bytes to spare (for a suffix such as .report.json):
// a longer one is cut and ends in a hash of the whole (see fit). Only a
// name that does not exist is free; any other answer from the file system
// is an error, and the look ends after maxCopies names. dir must be a
// folder, not a link to one.
func free(dir, name string, reserve int) (string, error) {
	// The folder itself must be one, not a link others could point
	// elsewhere (done/ and rejected/ are writable by the folder's writers).
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%s is not a folder (or not one the agent can see): it must be a folder, not a link", filepath.Base(dir))
	}
	limit := disk.NameMax(dir) - reserve
	for n := range maxCopies {
		cand := name
		if n > 0 {
			cand = name + "." + strconv.Itoa(n)
		}
		p := filepath.Join(dir, fit(cand, limit))
		_, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return p, nil
		}
		if err != nil {
			return "", fmt.Errorf("find a free name in %s: %w", filepath.Base(dir), err)
		}
	}
	return "", fmt.Errorf("find a free name in %s: %d copies of the name are there already: move older ones away", filepath.Base(dir), maxCopies)
}

// hashLen is how many hex digits of SHA-256 end a name fit cut.
const hashLen = 16

// fit is name when it is at most limit bytes; otherwise its first bytes
// (whole UTF-8 characters), '~' and the first hashLen hex digits of the
// SHA-256 of the whole name, limit bytes in all: distinct names stay
// distinct, and the beginning still says which file it was.
func fit(name string, limit int) string {
	if len(name) <= limit {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:])[:hashLen]
	keep := limit - 1 - hashLen
	if keep <= 0 {
		return h[:max(limit, 1)]
	}
	for keep > 0 && !utf8.RuneStart(name[keep]) {
		keep--
	}
	return name[:keep] + "~" + h
}
