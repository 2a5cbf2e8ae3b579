package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/rxedge/agent/testkit/agentbin"
)

// TestIngestPeakRSS sends the built agent the worst requests that fit in
// the 4 MiB body limit, each on its own run of the binary, and bounds the
// agent's peak resident memory (VmHWM): the error lists and the splitting
// must stay within a small multiple of the body limit. The figures are
// logged for the record.
func TestIngestPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/<pid>/status")
	}
	const limit = 4 << 20
	fill := func(unit string) []byte {
		return bytes.Repeat([]byte(unit), (limit-16)/len(unit))
	}
	var invalid []byte
	for i := range 10000 {
		invalid = fmt.Appendf(invalid, `{"movement_id":"M%d","type":"nope","ndc":"1","quantity":-1,"unit":"XX","occurred_at":"yesterday","colour":"red"}`+"\n", i)
	}
	cases := []struct {
		name, ct, query string
		body            []byte
	}{
		{"4 MiB of {} lines", "application/x-ndjson", "", fill("{}\n")},
		{"4 MiB of {} lines, each", "application/x-ndjson", "?each=1", fill("{}\n")},
		{"one-byte lines", "application/x-ndjson", "", fill("1\n")},
		{"deep [ nesting", "application/json", "", fill("[")},
		{"deep [ nesting in a line", "application/x-ndjson", "", fill("[")},
		{"a huge number", "application/json", "", append(append([]byte(`{"movement_id":"A","quantity":`), fill("9")...), '}')},
		{"huge numbers in an array", "application/json", "", append(append([]byte("["), bytes.Repeat([]byte(strings.Repeat("9", 60000)+","), 60)...), '1', ']')},
		{"movements with huge quantities", "application/x-ndjson", "", bytes.Repeat([]byte(movementJSON("Q", `,"quantity":`+strings.Repeat("9", 60000))+"\n"), 65)},
		{"invalid UTF-8", "application/x-ndjson", "", fill("{\"note\":\"\xff\"}\n")},
		{"10,000 invalid movements", "application/x-ndjson", "", invalid},
		{"10,000 invalid movements, each", "application/x-ndjson", "?each=1", invalid},
	}
	const bound = 96 << 20 // peak RSS, after one request, of a process that idles at ~20 MiB
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := agentbin.FreeAddr(t)
			a := startAgent(t, filepath.Join(t.TempDir(), "data"), addr, nil)
			idle := peakRSS(t, a.cmd.Process.Pid)
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/movements"+tc.query, bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.ct)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			peak := peakRSS(t, a.cmd.Process.Pid)
			t.Logf("%s: %d bytes in, %d %d bytes out, peak RSS %.1f MiB (idle %.1f MiB)", tc.name, len(tc.body), resp.StatusCode, n, float64(peak)/(1<<20), float64(idle)/(1<<20))
			if resp.StatusCode/100 == 2 && tc.query == "" {
				t.Errorf("answered %d", resp.StatusCode)
			}
			if n > 2<<20 {
				t.Errorf("answer of %d bytes", n)
			}
			if peak > bound {
				t.Errorf("peak RSS %d bytes, more than %d", peak, bound)
			}
		})
	}
}

// peakRSS is VmHWM of a process, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
