package powerloss

import (
	"testing"
	"time"
)

// TestPowerLossDuringIngest cuts the power while several clients post
// movements concurrently: every acknowledged movement is in the file that
// comes back, once.
func TestPowerLossDuringIngest(t *testing.T) {
	r := newRig(t)
	for i := 0; i < cuts(3); i++ {
		if r.start(false) {
			r.arm(3000)
			r.loadUntilCut(8, 10*time.Second)
		}
		r.powerCycle()
	}
	r.summary()
}
