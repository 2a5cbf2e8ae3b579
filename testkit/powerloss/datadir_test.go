package powerloss

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPowerLossCreatingDataDir cuts the power while the agent creates a new
// data directory (several levels deep) and its data file, and while the
// first movements arrive: once a movement is acknowledged, the directory,
// the file and the movement are all durable. Every third round the
// directories were created just before by another program that did not
// sync them, as an installer's mkdir -p leaves them.
func TestPowerLossCreatingDataDir(t *testing.T) {
	r := newRig(t)
	for i := 0; i < cuts(4); i++ {
		r.useDataDir(filepath.Join(r.mnt, fmt.Sprintf("s%02d", i), "rx", "data"))
		if i%3 == 1 {
			if err := os.MkdirAll(r.data, 0o750); err != nil {
				t.Fatal(err)
			}
			r.fs.SetTorn(0)
			r.fs.CutAfter(1 + r.rnd.IntN(150))
		} else {
			r.arm(150)
		}
		if r.start(false) {
			r.loadUntilCut(4, 10*time.Second)
		}
		r.powerCycle()
	}
	r.summary()
}
