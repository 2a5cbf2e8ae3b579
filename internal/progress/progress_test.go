package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestLine: the bar says what it counts, how fast and how long is left.
func TestLine(t *testing.T) {
	for _, tc := range []struct {
		name, unit   string
		done, total  int
		elapsed      time.Duration
		want, absent []string
	}{
		{"bytes, midway", Bytes, 3 << 20, 12 << 20, 3 * time.Second,
			[]string{"enqueue [", " 25% ", "3.0 MiB/12.0 MiB", "(1.0 MiB/s)", "ETA 9s"}, nil},
		{"movements, midway", "movements", 250, 1000, 5 * time.Second,
			[]string{" 25% ", "250/1000 movements", "(50/s)", "ETA 15s"}, []string{"MiB"}},
		{"finished", "movements", 1000, 1000, 2500 * time.Millisecond,
			[]string{"100% ", "1000/1000 movements", "done in 3s"}, []string{"ETA"}},
		{"nothing yet", Bytes, 0, 2048, time.Second,
			[]string{"0 B/2.0 KiB"}, []string{"ETA"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Line("enqueue", tc.unit, tc.done, tc.total, tc.elapsed)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(got, a) {
					t.Errorf("%q has %q", got, a)
				}
			}
		})
	}
}

// TestNotATerminal: a bar into a pipe or buffer draws nothing.
func TestNotATerminal(t *testing.T) {
	var b bytes.Buffer
	if bar := New(&b, "x", Bytes, 10); bar != nil {
		t.Fatal("a bar into a buffer")
	}
	var nilBar *Bar
	nilBar.Add(3)
	nilBar.Done()
	if b.Len() != 0 {
		t.Fatalf("drew %q", b.String())
	}
}
