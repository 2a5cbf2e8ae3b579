package powerloss

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestPowerLossCreatingDataDir cuts the power while the agent creates a new
// data directory (several levels deep) and its data file, and while the
// first movements arrive: once a movement is acknowledged, the directory,
// the file and the movement are all durable.
func TestPowerLossCreatingDataDir(t *testing.T) {
	r := newRig(t)
	for i := 0; i < cuts(4); i++ {
		r.useDataDir(filepath.Join(r.mnt, fmt.Sprintf("s%02d", i), "rx", "data"))
		r.arm(150)
		if r.start(false) {
			r.loadUntilCut(4, 10*time.Second)
		}
		r.powerCycle()
	}
	r.summary()
}
