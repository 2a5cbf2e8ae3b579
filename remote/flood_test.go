package remote

import (
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/queue"
)

// TestRefusalFloodIsBounded refuses a forged command every 100 ms of the
// agent's clock for three hours, of every kind a store without an
// operator key can send, and measures what the journal grew by: at most
// one event per cause per RefusalWindow, and at most RefusalBytesPerHour
// in any hour, with every refusal counted.
func TestRefusalFloodIsBounded(t *testing.T) {
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: "S0001"})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	opKey, _ := nkeys.CreateUser()
	opPub, _ := opKey.PublicKey()
	forger, _ := nkeys.CreateUser()
	forgerPub, _ := forger.PublicKey()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	// The responder's own flush timer may fire (on the real clock) while
	// the loop advances the agent's: the clock is read atomically.
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	r := New(Options{Queue: q, StoreID: "S0001", OperatorKeys: []string{opPub},
		Clock: func() time.Time { return time.Unix(0, clock.Load()).UTC() }})
	defer r.Close()

	forged := [][]byte{
		nil,               // unsigned
		[]byte(`{"cmd":`), // malformed
		[]byte(`{"key":"` + forgerPub + `","sig":"AAAA"}`), // unknown key
		[]byte(`{"cmd":"status","store":"S0001","nonce":"0190a4b2-0000-7000-8000-000000000000","expires":"2026-03-01T00:01:00Z","key":"` + opPub + `","sig":"AAAA"}`), // claims the operator's key
	}
	const step = 100 * time.Millisecond
	const hours = 3
	sent := 0
	for end := now.Add(hours * time.Hour); now.Before(end); now = now.Add(step) {
		clock.Store(now.UnixNano())
		rep := r.serve(forged[sent%len(forged)], "rx.ctl.S0001.status", command.CmdStatus)
		if rep.OK {
			t.Fatalf("a forged command was accepted: %+v", rep)
		}
		sent++
		if sent%600 == 0 { // the timer's work, once a minute
			r.flushRefusals()
		}
	}
	r.flushRefusals()

	perHour := map[int]int{}
	counted := 0
	events := 0
	err = q.Events(time.Time{}, func(e queue.Event) bool {
		if e.Action != queue.ActionRefused {
			return true
		}
		if e.Actor == "remote:"+opPub || e.Actor == "remote:"+forgerPub {
			t.Errorf("a refusal is attributed to the key it claims: %+v", e)
		}
		b, _ := json.Marshal(e)
		perHour[int(e.At.Sub(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))/time.Hour)] += len(b)
		counted += e.Count
		events++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d forged commands in %d hours: %d journal events, bytes per hour %v", sent, hours, events, perHour)
	for h, n := range perHour {
		if n > RefusalBytesPerHour {
			t.Errorf("hour %d: %d journal bytes of refusals, more than %d", h, n, RefusalBytesPerHour)
		}
	}
	if max := hours * 60 * 3; events > max {
		t.Errorf("%d events, more than one per cause per minute (%d)", events, max)
	}
	// What the budget held back is in the last hour's events or still
	// counted; nothing is lost from the count but the tail.
	if counted < sent/2 {
		t.Errorf("the events count %d refusals of %d", counted, sent)
	}
}

// TestRefusalLog is the aggregation rule as a table: the first refusal of
// a cause is journalled at once, later ones within the window are counted
// into the next event of that cause.
func TestRefusalLog(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	a := cause{code: command.CodeMalformed, reason: "malformed", actor: ActorUnverified}
	b := cause{code: command.CodeUnsigned, reason: "unsigned", actor: ActorUnsigned}
	l := newRefusalLog()
	steps := []struct {
		c     *cause // nil: a flush
		at    time.Duration
		count []int // counts of the events returned
	}{
		{&a, 0, []int{1}},
		{&a, time.Second, nil},
		{&b, 2 * time.Second, []int{1}},
		{&a, 30 * time.Second, nil},
		{nil, 59 * time.Second, nil},
		{nil, 61 * time.Second, []int{2}},
		{&a, 62 * time.Second, nil},
		{&b, 63 * time.Second, []int{1}},
		{nil, 3 * time.Minute, []int{1}},
	}
	for i, s := range steps {
		var evs []queue.Event
		if s.c == nil {
			evs = l.due(t0.Add(s.at))
		} else {
			evs = l.note(*s.c, command.CmdStatus, t0.Add(s.at))
		}
		var got []int
		for _, e := range evs {
			got = append(got, e.Count)
		}
		if len(got) != len(s.count) || (len(got) > 0 && got[0] != s.count[0]) {
			t.Errorf("step %d: got counts %v, want %v", i, got, s.count)
		}
	}
}
