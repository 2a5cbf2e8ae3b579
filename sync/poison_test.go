package sync

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

// Where a poison movement's subject is sent by a server subject mapping:
// to a subscriber that never answers, or to no subscriber at all ("no
// responders").
const (
	sinkSilent = "poison.silent"
	sinkNobody = "poison.nobody"
)

// poisonOptions are short timeouts and retry delays, so that a movement
// reaches its ceiling in seconds.
func poisonOptions(t *testing.T, url string) Options {
	o := testOptions(t, url)
	o.AttemptTimeout = time.Second
	return o
}

// silentSink subscribes to the silent sink and counts what reaches it.
func silentSink(t *testing.T, url string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	nc := natstest.Connect(t, url)
	for _, subject := range []string{sinkSilent, sinkSilent + ".>"} {
		if _, err := nc.Subscribe(subject, func(*nats.Msg) { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// poison maps the subject of movement p to sink on the server.
func poison(t *testing.T, srv *natstest.Server, p movement.Prepared, sink string) {
	t.Helper()
	if err := srv.Hub().Server().GlobalAccount().AddMapping(central.Subject(testStore, p.KeyString()), sink); err != nil {
		t.Fatal(err)
	}
}

// ceiling is the attempts of p's class.
func ceiling(o Options, p movement.Prepared) int {
	if p.Class == movement.Controlled {
		return o.Controlled.MaxAttempts
	}
	return o.Ordinary.MaxAttempts
}

// TestPoisonDoesNotStallTheBacklog: poison movements (central never
// answers for their subjects, or nobody takes them) in a backlog of 1,000,
// on the batch path and on the trickle path. Every other movement reaches
// central exactly once, without a charge, and each poison movement is
// quarantined after exactly its class's ceiling of attempts.
func TestPoisonDoesNotStallTheBacklog(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		name    string
		noBatch bool
		at      []int // the poison movements' places in the backlog
		sink    string
	}{
		{"batch/head", false, []int{0}, sinkSilent},
		{"trickle/head", true, []int{0}, sinkSilent},
		{"batch/middle", false, []int{500}, sinkSilent},
		{"trickle/middle", true, []int{500}, sinkSilent},
		{"batch/two", false, []int{0, 500}, sinkSilent},
		{"trickle/two", true, []int{0, 500}, sinkSilent},
		{"batch/head/no_responders", false, []int{0}, sinkNobody},
		{"trickle/middle/no_responders", true, []int{500}, sinkNobody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.StartHub(t)
			published := silentSink(t, srv.URL())
			o := poisonOptions(t, srv.URL())
			r := startRig(t, o, func(s *Options) { s.NoBatch = tc.noBatch })
			r.stop() // the backlog builds up while the agent is stopped
			items := r.enqueue(0, n)
			var bad []movement.Prepared
			want := 0
			for _, i := range tc.at {
				bad = append(bad, items[i])
				poison(t, srv, items[i], tc.sink)
				want += ceiling(o, items[i])
			}

			start := time.Now()
			r.start()
			r.waitFor(fmt.Sprintf("%d synced", n-len(bad)), 90*time.Second, func(s queue.Stats) bool {
				return s.Count(queue.Synced) == uint64(n-len(bad))
			})
			delivered := time.Since(start)
			r.waitFor("the poison quarantined", 90*time.Second, func(s queue.Stats) bool {
				return s.Count(queue.Quarantined) == uint64(len(bad))
			})
			quarantined := time.Since(start)

			kind := "exhausted:timeout"
			if tc.sink == sinkNobody {
				kind = "exhausted:no_responders"
			}
			for _, p := range bad {
				e, err := r.q.Get(p.Key)
				if err != nil {
					t.Fatal(err)
				}
				if e.State != queue.Quarantined || e.Record.Quarantine.Reason != kind || e.Record.Attempts != ceiling(o, p) {
					t.Errorf("poison %s: %s after %d attempt(s), reason %q; want quarantined after %d, %q",
						p.KeyString(), e.State, e.Record.Attempts, e.Record.Quarantine.Reason, ceiling(o, p), kind)
				}
			}
			exactlyOnce(t, srv.URL(), n-len(bad))
			if split := strings.Count(r.logs.String(), `"msg":"SYNC_BATCH_SINGLY"`); !tc.noBatch && split == 0 {
				t.Error("no atomic batch was split: the batch path was not taken")
			}
			// Each attempt is one publish, plus at most the failed batch
			// that first carried it and a resend after a pause.
			if got := published.Load(); tc.sink == sinkSilent && (got < int64(want) || got > int64(2*want+2)) {
				t.Errorf("the poison was published %d times for %d attempts", got, want)
			}
			t.Logf("%d others delivered in %s; %d poison quarantined after %s; %d attempts, %d publishes reached the silent sink",
				n-len(bad), delivered.Round(time.Millisecond), len(bad), quarantined.Round(time.Millisecond), want, published.Load())
		})
	}
}

// TestQuietStorePoison: a store whose only movement is one central never
// answers for. While central answers for the store, the movement is
// charged and quarantined after its ceiling; while central answers
// nothing for the store (its whole namespace leads nowhere), nothing is
// charged however long that lasts, and the sender pauses.
func TestQuietStorePoison(t *testing.T) {
	for _, sink := range []string{sinkSilent, sinkNobody} {
		t.Run(strings.TrimPrefix(sink, "poison."), func(t *testing.T) {
			t.Parallel()
			srv := natstest.StartHub(t)
			silentSink(t, srv.URL())
			o := poisonOptions(t, srv.URL())
			r := startRig(t, o, func(s *Options) { s.NoBatch = true })
			r.enqueue(0, 10)
			r.waitSynced(10, 30*time.Second)

			// Central down for this store: nothing is charged.
			acc := srv.Hub().Server().GlobalAccount()
			namespace := central.Subject(testStore, ">")
			if err := acc.AddMapping(namespace, sink+".>"); err != nil {
				t.Fatal(err)
			}
			p := r.prepare(movementJSON("POISON", ""))
			if _, err := r.q.Enqueue([]movement.Prepared{p}); err != nil {
				t.Fatal(err)
			}
			waitState(t, r, status.Paused, "systemic:unresponsive")
			// Probe after probe goes unanswered.
			const probes = 8
			deadline := time.Now().Add(60 * time.Second)
			for strings.Count(r.logs.String(), `"msg":"SYNC_ALIVE","answered":false`) < probes {
				if time.Now().After(deadline) {
					t.Fatalf("fewer than %d unanswered liveness probes in 60s; %+v", probes, r.e.Connection())
				}
				time.Sleep(20 * time.Millisecond)
			}
			e, _ := r.q.Get(p.Key)
			if e.State != queue.Pending || e.Record.Attempts != 0 {
				t.Fatalf("with central answering nothing for the store: %s after %d attempt(s)", e.State, e.Record.Attempts)
			}
			if c := r.e.Connection(); c.State != status.Paused {
				t.Fatalf("with central answering nothing for the store: %+v", c)
			}
			t.Logf("%d probes unanswered: pending, 0 attempts, %s", probes, r.e.Connection().Reason)

			// Central back for the store, except for this movement.
			acc.RemoveMapping(namespace)
			poison(t, srv, p, sink)
			back := time.Now()
			r.waitFor("the poison quarantined", 60*time.Second, func(s queue.Stats) bool { return s.Count(queue.Quarantined) == 1 })
			e, _ = r.q.Get(p.Key)
			if e.Record.Attempts != o.Ordinary.MaxAttempts {
				t.Fatalf("quarantined after %d attempt(s), want %d", e.Record.Attempts, o.Ordinary.MaxAttempts)
			}
			t.Logf("quarantined %s after central came back, reason %s", time.Since(back).Round(time.Millisecond), e.Record.Quarantine.Reason)
			exactlyOnce(t, srv.URL(), 10)
		})
	}
}
