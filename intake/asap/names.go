package asap

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// maxCopies bounds the copies of one name free looks through: a name
// reused daily fills it in about 180 years.
const maxCopies = 1 << 16

// free is a name in folder d for a file named name that no entry holds:
// name, or name.N for the first N not taken, so a file sent twice under
// one name keeps both copies. Every name it tries fits the file system
// with reserve bytes to spare (for a suffix such as .report.json): a
// longer one is cut and ends in a hash of the whole (see fit). Only a
// name that does not exist is free; any other answer from the file system
// is an error, and the look ends after maxCopies names. Names are looked
// up in the folder d holds open, so a link put in its place is not
// followed.
func free(d *dir, name string, reserve int) (string, error) {
	limit := d.nameMax() - reserve
	for n := range maxCopies {
		cand := name
		if n > 0 {
			cand = name + "." + strconv.Itoa(n)
		}
		p := fit(cand, limit)
		there, err := d.exists(p)
		if err != nil {
			return "", fmt.Errorf("find a free name in %s: %w", d.name, err)
		}
		if !there {
			return p, nil
		}
	}
	return "", fmt.Errorf("find a free name in %s: %d copies of the name are there already: move older ones away", d.name, maxCopies)
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
