package powerloss

import (
	"net/http"
	"testing"
	"time"

	"github.com/rxedge/agent/testkit/natstest"
)

// TestPowerLossDuringDrain cuts the power while the agent drains a backlog
// to central (and takes new movements): what the agent holds as synced is
// in central, and every acknowledged movement is held once, in one state.
func TestPowerLossDuringDrain(t *testing.T) {
	r := newRig(t)
	r.hub = natstest.StartHub(t)
	client := &http.Client{}
	for i := 0; i < cuts(3); i++ {
		// A backlog, acknowledged while the agent has no central.
		if !r.start(false) {
			t.Fatalf("cut %d: the power went off with no cut armed", r.cuts)
		}
		for j := 0; j < 10; j++ {
			r.post(client, 50, "")
		}
		r.kill()
		if r.start(true) {
			r.arm(3000)
			r.loadUntilCut(1, 10*time.Second)
		}
		r.powerCycle()
	}
	r.summary()
}
