package command_test

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/rxedge/agent/central/command"
)

// What decoding an envelope may allocate, for any input: envelopeBytesPerByte
// per byte of it plus envelopeBytesFixed. An envelope is refused for its
// size (MaxEnvelopeBytes) before it is read; within it, most inputs take
// a few copies of themselves, and the most per byte goes to deep nesting
// in args, which encoding/json tracks level by level up to its limit of
// 10,000 levels.
const (
	envelopeBytesPerByte = 48
	envelopeBytesFixed   = 4 << 10
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

func checkEnvelopeBound(t *testing.T, data []byte) {
	t.Helper()
	if n, limit := allocated(func() { command.DecodeEnvelope(data) }), envelopeBytesPerByte*uint64(len(data))+envelopeBytesFixed; n > limit {
		t.Fatalf("decoding %d bytes allocated %d bytes, more than %d a byte and %d", len(data), n, envelopeBytesPerByte, envelopeBytesFixed)
	}
}

// TestDecodeEnvelopeBoundsItsWork: an envelope over MaxEnvelopeBytes is
// refused before it is read, whatever it holds; the largest accepted,
// made of the smallest values or the deepest nesting, stay within the
// bound.
func TestDecodeEnvelopeBoundsItsWork(t *testing.T) {
	big := []byte(`{"args":[` + strings.Repeat("0,", 1<<20) + `0]}`)
	var err error
	if n := allocated(func() { _, err = command.DecodeEnvelope(big) }); !errors.Is(err, command.ErrMalformed) || n > 1<<10 {
		t.Errorf("an envelope of %d bytes: %v, %d bytes allocated; want refused for its size, with next to nothing allocated", len(big), err, n)
	}
	fill := func(unit string) []byte {
		head := []byte(`{"args":[`)
		return append(append(head, bytes.Repeat([]byte(unit+","), (command.MaxEnvelopeBytes-len(head)-3)/(len(unit)+1))...), '0', ']', '}')
	}
	for name, data := range map[string][]byte{
		"zeros":   fill("0"),
		"objects": fill("{}"),
		"escapes": fill(`"\u0041"`),
		"nesting": []byte(`{"args":` + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) + `}`),
	} {
		if len(data) > command.MaxEnvelopeBytes {
			t.Fatalf("%s: %d bytes, over the limit", name, len(data))
		}
		checkEnvelopeBound(t, data)
	}
}
