package powerloss

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/movement"
)

// TestPowerLossDuringEnqueue cuts the power while `agent enqueue -f`
// submits a file of movements, straight into the data file (agent
// stopped; the first round creates the file) and through the running
// agent: after exit 0, every movement of the file is held.
func TestPowerLossDuringEnqueue(t *testing.T) {
	r := newRig(t)
	for i := 0; i < cuts(4); i++ {
		ids := make([]string, 200)
		lines := make([]string, len(ids))
		r.mu.Lock()
		for j := range ids {
			r.next++
			ids[j] = fmt.Sprintf("E%07d", r.next)
			lines[j] = movementJSON(ids[j], "")
		}
		r.mu.Unlock()
		file := filepath.Join(t.TempDir(), "movements.jsonl")
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 && !r.start(false) {
			t.Fatalf("cut %d: the power went off with no cut armed", r.cuts)
		}
		r.arm(200)
		if code, _, _ := r.cli("enqueue", "-f", file, "--data-dir", r.data, "--store-id", storeID); code == 0 {
			r.mu.Lock()
			for _, id := range ids {
				r.acked[id] = movement.KeyString(storeID, id)
			}
			r.totalAcks += len(ids)
			r.mu.Unlock()
		}
		r.powerCycle()
	}
	r.summary()
}
