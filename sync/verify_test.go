package sync

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/dlqtest"
)

// TestDigestChecksAreBounded: after an outage in which every
// acknowledgement was lost, central answers each of a thousand resends
// "already stored". The agent reads central's copy of each, but never more
// than maxVerifies at once, whatever the publishes in flight.
func TestDigestChecksAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1000
		c := &scripted{mode: "ok", stored: map[string]bool{}, timeout: 5 * time.Second, digestDelay: 100 * time.Millisecond}
		q, s, stop := pacingRig(t, c, Options{NoBatch: true, MaxInFlight: 512, ResumeJitter: time.Millisecond})
		defer stop()
		enqueueN(t, q, 0, n)
		for _, r := range dlqtest.Pending(t, q) {
			c.stored[central.Subject(testStore, r.KeyString())] = true
		}
		s.notify(event{kind: evConnected, url: "nats://central"})
		time.Sleep(10 * time.Second)
		c.mu.Lock()
		digests, most := c.digests, c.maxInDigest
		c.mu.Unlock()
		if digests < n {
			t.Fatalf("%d direct gets in 10s, want at least one for each of the %d movements", digests, n)
		}
		if most != maxVerifies {
			t.Fatalf("at most %d direct gets in flight at once, want the bound %d reached and never passed", most, maxVerifies)
		}
	})
}
