// Package suggest finds the name a user most likely meant: the settings
// loader offers it for an unknown key, and both binaries for an unknown
// flag, so "did you mean" reads the same everywhere.
package suggest

import "strings"

// Closest is the known name nearest to name, when one is near enough to
// be a typo: at most two edits away (letter case aside), or one is the
// start of the other. It is "" when none is.
func Closest(name string, known []string) string {
	lower := strings.ToLower(name)
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(lower, k); d < bestD && d < len(k) {
			best, bestD = k, d
		}
	}
	if best != "" || len(lower) < 3 {
		return best
	}
	for _, k := range known {
		if strings.HasPrefix(k, lower) || strings.HasPrefix(lower, k) {
			return k
		}
	}
	return ""
}

// editDistance is the Damerau–Levenshtein distance (with transpositions)
// of a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
