package control

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// What splitting a body may allocate: splitBytesPerByte per byte of it,
// splitBytesPerItem per movement it may hold (maxItems), plus
// splitBytesFixed. Lines are slices of the body; an array's elements are
// copied once, through encoding/json's decoder, whose buffer and nesting
// stack (up to its limit of 10,000 levels) are the rest.
const (
	splitBytesPerByte = 48
	splitBytesPerItem = 256
	splitBytesFixed   = 16 << 10
)

// allocated is the bytes f allocates on the heap: the least of three
// runs, so that what another goroutine of the test binary allocates
// meanwhile does not count.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	least := ^uint64(0)
	for range 3 {
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

func checkSplitBound(t *testing.T, body []byte, ct string, maxItems int) {
	t.Helper()
	n := allocated(func() { splitBody(body, ct, maxItems) })
	if limit := splitBytesPerByte*uint64(len(body)) + splitBytesPerItem*uint64(maxItems+1) + splitBytesFixed; n > limit {
		t.Fatalf("splitting %d bytes (at most %d items) allocated %d bytes, more than %d", len(body), maxItems, n, limit)
	}
}

// TestSplitBodyBoundsItsWork splits bodies of the largest size (4 MiB)
// made of the smallest items, the deepest nesting and the most escapes,
// with the default limit of items: each is refused at the first item past
// the limit, or split, within the bound, and within twice the body's
// size, a few hundred bytes for each item it may hold and a mebibyte for
// encoding/json's nesting.
func TestSplitBodyBoundsItsWork(t *testing.T) {
	const limit = 4 << 20
	fill := func(unit string) []byte { return bytes.Repeat([]byte(unit), (limit-16)/len(unit)) }
	array := func(unit string, n int) []byte {
		return append(append([]byte("["), bytes.Repeat([]byte(unit+","), n)...), '0', ']')
	}
	for name, c := range map[string]struct {
		body []byte
		ct   string
	}{
		"{} lines":                 {fill("{}\n"), typeNDJSON},
		"empty lines":              {fill("\n"), typeNDJSON},
		"as many lines as allowed": {bytes.Repeat([]byte("{}\n"), DefaultMaxMovements), typeNDJSON},
		"zeros in an array":        {array("0", (limit-16)/2), typeJSON},
		"as many zeros as allowed": {array("0", DefaultMaxMovements-1), typeJSON},
		"nesting in an array":      {array(strings.Repeat("[", 9000)+strings.Repeat("]", 9000), (limit-16)/18001), typeJSON},
		"escapes in an array":      {array(`"`+strings.Repeat(`\u0041`, 60)+`"`, DefaultMaxMovements-1), typeJSON},
		"deep nesting":             {fill("["), typeJSON},
		"one object":               {append(fill(" "), '{', '}'), typeJSON},
		"empty arrays in an array": {array("[]", DefaultMaxMovements-1), typeJSON},
		"an array with no end":     {fill("[0,"), typeJSON},
	} {
		t.Run(name, func(t *testing.T) {
			checkSplitBound(t, c.body, c.ct, DefaultMaxMovements)
			n := allocated(func() { splitBody(c.body, c.ct, DefaultMaxMovements) })
			t.Logf("%d bytes: %d bytes allocated", len(c.body), n)
			if limit := 2*uint64(len(c.body)) + splitBytesPerItem*DefaultMaxMovements + 1<<20; n > limit {
				t.Errorf("%d bytes allocated for %d bytes, more than %d", n, len(c.body), limit)
			}
		})
	}
}
