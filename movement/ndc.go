package movement

import "errors"

// NDC spellings. A National Drug Code is a labeler, a product and a
// package code. FDA lists ten-digit codes in three shapes (4-4-2, 5-3-2,
// 5-4-1); billing (NCPDP) and DSCSA use eleven digits, 5-4-2, made by
// padding the short group with a leading zero. The same product therefore
// reaches a store in several spellings: 00591-0540-01, 00591054001 and
// 0591-0540-01 are one package. The canonical form is the eleven digits
// in 5-4-2 with their hyphens (CanonicalNDC); every movement is stored
// in it, so every intake and every view agrees on one product identity.

// Errors of CanonicalNDC.
var (
	// ErrNDCAmbiguous is a bare ten-digit NDC: without its hyphens it may
	// be 4-4-2, 5-3-2 or 5-4-1, three different products.
	ErrNDCAmbiguous = errors.New("a bare 10-digit NDC is ambiguous (4-4-2, 5-3-2 or 5-4-1)")
	// ErrNDCForm is a string that is no NDC in any accepted spelling.
	ErrNDCForm = errors.New("not an NDC in 4-4-2, 5-3-2, 5-4-1 or 5-4-2 form")
)

// ndcLen is the length of a canonical NDC, "LLLLL-PPPP-KK".
const ndcLen = 13

// CanonicalNDC is s in its canonical form, 11 digits as 5-4-2 with
// hyphens: a hyphenated 4-4-2, 5-3-2 or 5-4-1 NDC is padded with a zero in
// its short group; 11 bare digits are read as 5-4-2. A bare 10-digit NDC
// is ErrNDCAmbiguous (NDCCandidates lists what it may be); anything else
// that is not an NDC is ErrNDCForm. Neither error quotes s.
func CanonicalNDC(s string) (string, error) {
	var g [3]string
	n := 0
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '-' {
			if s[i] < '0' || s[i] > '9' {
				return "", ErrNDCForm
			}
			continue
		}
		if n == len(g) || i == start {
			return "", ErrNDCForm
		}
		g[n] = s[start:i]
		n++
		start = i + 1
	}
	switch {
	case n == 1 && len(s) == 11:
		return s[:5] + "-" + s[5:9] + "-" + s[9:], nil
	case n == 1 && len(s) == 10:
		return "", ErrNDCAmbiguous
	case n != 3:
		return "", ErrNDCForm
	}
	switch l := [3]int{len(g[0]), len(g[1]), len(g[2])}; l {
	case [3]int{5, 4, 2}:
	case [3]int{4, 4, 2}:
		g[0] = "0" + g[0]
	case [3]int{5, 3, 2}:
		g[1] = "0" + g[1]
	case [3]int{5, 4, 1}:
		g[2] = "0" + g[2]
	default:
		return "", ErrNDCForm
	}
	return g[0] + "-" + g[1] + "-" + g[2], nil
}

// NDCCandidates is what a bare 10-digit NDC may stand for: its canonical
// form read as 4-4-2, as 5-3-2 and as 5-4-1, in that order. ok is false
// when s is not ten digits. A formulary that knows exactly one of them
// resolves the ambiguity (intake.Formulary.Resolve).
func NDCCandidates(s string) (c [3]string, ok bool) {
	if len(s) != 10 || !digits(s) {
		return c, false
	}
	c[0] = "0" + s[:4] + "-" + s[4:8] + "-" + s[8:]
	c[1] = s[:5] + "-0" + s[5:8] + "-" + s[8:]
	c[2] = s[:5] + "-" + s[5:9] + "-0" + s[9:]
	return c, true
}

// NDCSpellings is every spelling that stands for the canonical NDC c: c
// itself, its 11 bare digits and, for each group that starts with the
// padding zero, the 10-digit form without it, hyphenated and bare. A bare
// 10-digit spelling stands for c only where a formulary resolves it so.
// It is nil when c is not canonical.
func NDCSpellings(c string) []string {
	if len(c) != ndcLen || c[5] != '-' || c[10] != '-' || !digits(c[:5]+c[6:10]+c[11:]) {
		return nil
	}
	l, p, k := c[:5], c[6:10], c[11:]
	out := []string{c, l + p + k}
	if l[0] == '0' {
		out = append(out, l[1:]+"-"+p+"-"+k, l[1:]+p+k)
	}
	if p[0] == '0' {
		out = append(out, l+"-"+p[1:]+"-"+k, l+p[1:]+k)
	}
	if k[0] == '0' {
		out = append(out, l+"-"+p+"-"+k[1:], l+p+k[1:])
	}
	return out
}

// spells reports whether s is a spelling of the canonical NDC c: its
// canonical form is c, or it is a bare 10-digit NDC one of whose
// candidates is c.
func spells(s, c string) bool {
	if k, err := CanonicalNDC(s); err == nil {
		return k == c
	}
	cs, ok := NDCCandidates(s)
	return ok && (cs[0] == c || cs[1] == c || cs[2] == c)
}
