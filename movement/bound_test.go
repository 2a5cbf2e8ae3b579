package movement

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// What decoding or preparing a movement may allocate, for any input:
// bytesPerByte per byte of it plus bytesFixed. Most inputs take about a
// copy of themselves; the most per byte goes to deep nesting in a value,
// which encoding/json tracks level by level up to its limit of 10,000
// levels. The fixed part holds the errors of one movement: at most
// MaxMembers and the validation's.
const (
	bytesPerByte = 40
	bytesFixed   = 16 << 10
)

// tooManyMembers is the error of an object with more than MaxMembers
// members.
var tooManyMembers = FieldError{Msg: fmt.Sprintf("has more than %d members: a movement has at most %d fields", MaxMembers, len(fields))}

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

// checkBound fails when f, decoding data, allocates more than the bound.
func checkBound(t *testing.T, data []byte, f func()) {
	t.Helper()
	if n, limit := allocated(f), bytesPerByte*uint64(len(data))+bytesFixed; n > limit {
		t.Fatalf("%d bytes allocated for %d bytes of input, more than %d a byte and %d", n, len(data), bytesPerByte, bytesFixed)
	}
}

// TestDecodeRefusesPastMaxMembers decodes objects of the largest size
// one movement may have on the ingest (64 KiB) made of one member
// repeated: refused once MaxMembers are passed, with at most that many
// errors and for about the object's size. A decoder that words an error
// for every member spends 60 to 80 bytes for each byte of them.
func TestDecodeRefusesPastMaxMembers(t *testing.T) {
	const size = 64 << 10
	for _, member := range []string{`"a":1`, `"":1`, `"note":""`, `"quantity":1`, `"a":{}`, `"a":[0,0,0]`} {
		n := (size - 2) / (len(member) + 1)
		data := []byte("{" + strings.Repeat(member+",", n-1) + member + "}")
		var m *Movement
		var es Errors
		alloc := allocated(func() { m, es = Decode(data) })
		t.Logf("%s ×%d: %d errors, %d bytes allocated", member, n, len(es), alloc)
		if m != nil || len(es) > MaxMembers+1 || !slices.Contains(es, tooManyMembers) {
			t.Errorf("%s ×%d: %d errors; want at most %d, one of them %v", member, n, len(es), MaxMembers+1, tooManyMembers)
		}
		if alloc > 2*uint64(len(data)) {
			t.Errorf("%s ×%d: %d bytes allocated for %d bytes", member, n, alloc, len(data))
		}
	}
}
