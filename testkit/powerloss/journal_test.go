package powerloss

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestPowerLossDuringJournalWrites cuts the power while an operator runs
// the commands that write the audit journal (DESIGN P8): dlq redrive,
// purge and export, through the running agent and, every second round,
// on the data file directly with the agent stopped. A command that
// completed (exit 0) must have left its journal entries, its state
// changes and its files; every quarantined or purged movement is named by
// a journal entry.
func TestPowerLossDuringJournalWrites(t *testing.T) {
	r := newRig(t)
	// Movements with a long note are too large for central: quarantined
	// at their first attempt.
	r.hub = natstest.StartHub(t, natstest.WithMaxPayload(2048))
	big := strings.Repeat("€", 1000) // 3000 bytes in 1000 characters
	client := &http.Client{}
	purged, exports := 0, 0
	for i := 0; i < cuts(4); i++ {
		if !r.start(true) {
			t.Fatalf("cut %d: the power went off with no cut armed", r.cuts)
		}
		r.post(client, 3, big)
		r.post(client, 3, "")
		r.mu.Lock()
		poison := 3*(i+1) - purged
		r.mu.Unlock()
		r.waitStatus("the large movements quarantined", 30*time.Second, func(c counts) bool {
			return c.Quarantined.total() >= uint64(poison)
		})
		direct := i%2 == 1
		if direct {
			r.kill()
		}
		r.arm(150)
		off := r.fs.Off()
	commands:
		for c := 0; c < 12; c++ {
			select {
			case <-off:
				break commands
			default:
			}
			keys := r.quarantined()
			if len(keys) == 0 {
				continue
			}
			r.rnd.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			switch r.rnd.IntN(3) {
			case 0:
				ks := keys[:min(2, len(keys))]
				args := append([]string{"dlq", "redrive", "--data-dir", r.data, "--reason-text", "power test"}, ks...)
				if code, _, _ := r.cli(args...); code == 0 {
					r.expectAfter(expectation{what: "dlq redrive", action: queue.ActionRedrive, keys: ks})
				}
			case 1:
				code, out, _ := r.cli("dlq", "purge", "--data-dir", r.data, "--reason-text", "power test", "--yes", keys[0])
				if code != 0 {
					continue
				}
				n, file, ok := exported(out)
				if !ok {
					t.Fatalf("dlq purge: no export file named in %q", out)
				}
				if !filepath.IsAbs(file) {
					file = filepath.Join(r.data, file)
				}
				purged++
				exports++
				r.expectAfter(expectation{what: "dlq purge", action: queue.ActionPurge, keys: keys[:1], state: queue.Purged, file: file, content: keys[:1], lines: n})
				r.expectAfter(expectation{what: "dlq purge", action: queue.ActionExport, count: exports})
			case 2:
				file := filepath.Join(r.data, fmt.Sprintf("export-%d-%d.jsonl", i, c))
				code, out, _ := r.cli("dlq", "export", "--data-dir", r.data, "-o", file)
				if code != 0 {
					continue
				}
				n, _, ok := exported(out)
				if !ok {
					t.Fatalf("dlq export: no count in %q", out)
				}
				exports++
				r.expectAfter(expectation{what: "dlq export -o", action: queue.ActionExport, count: exports, file: file, lines: n})
			}
		}
		r.powerCycle()
	}
	r.summary()
}
