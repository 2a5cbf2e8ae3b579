package console_test

import (
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/fleetsim"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// storeEvents are a store's journal events of action.
func storeEvents(t *testing.T, s *fleetsim.Store, action string) []queue.Event {
	t.Helper()
	var out []queue.Event
	if err := s.Queue.Events(time.Time{}, func(e queue.Event) bool {
		if e.Action == action {
			out = append(out, e)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBulkRedriveAcrossStores: the preview lists the stores of the
// filter that report a quarantine, with their counts; the redrive signs
// one command per store, each carrying the user, and names the store
// whose agent is not connected; a store whose agent predates the actor
// argument gets the user in its reason text instead; both journals say
// what happened.
func TestBulkRedriveAcrossStores(t *testing.T) {
	hub := natstest.StartHub(t)
	op := ledgertest.OperatorSigner(t)
	o := fleetsim.Options{URL: hub.URL(), Dir: t.TempDir(), OperatorKeys: []string{op.PublicKey()}, Quarantined: 2}
	var stores []*fleetsim.Store
	for _, id := range []string{"S0001", "S0002", "S0003"} {
		s, err := fleetsim.Start(t.Context(), o, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		stores = append(stores, s)
	}
	// S0003 reads as an older agent: its summary lists no features.
	old := command.Summary{StoreID: "S0003", State: status.Online, Quarantined: 2, Version: "1.0.0", GeneratedAt: time.Now()}
	seed(t, hub, old)
	// S0009 reports a quarantine, but no agent answers for it.
	seed(t, hub, command.Summary{StoreID: "S0009", State: status.Online, Quarantined: 1, Version: "1.0.0", GeneratedAt: time.Now()})
	h := startConsole(t, hub, op, nil, func(o *console.Options) { o.BulkConcurrency = 2 })
	waitFor(t, "the index to hold the four stores", func() bool {
		r, _ := h.index.Get("S0003")
		return h.index.Query(fleet.Query{State: fleet.CondQuarantining}).Matched == 4 && r.Summary != nil && r.Summary.Version == "1.0.0"
	})

	code, page := get(t, h, "olga@chain.example", "", "/bulk?state=quarantining")
	m := regexp.MustCompile(`name="stores" value="([^"]*)"`).FindStringSubmatch(page)
	if code != 200 || m == nil || m[1] != "S0001 S0002 S0003 S0009" || !strings.Contains(page, "4 store(s) report 7 quarantined movement(s)") {
		t.Fatalf("preview: %d, stores %v\n%s", code, m, page)
	}
	c, csrf := session(t, h, "olga@chain.example")
	code, page = post(t, h, "olga@chain.example", c, "/bulk", url.Values{"csrf": {csrf}, "stores": {m[1]}, "filter": {"permanent:too_large"}, "reason": {"limit raised"}}, nil)
	if code != 200 || !strings.Contains(page, "3 of 4 store(s) done, 6 movement(s) redriven.") || !strings.Contains(page, "Not done at 1 store(s): S0009.") {
		t.Fatalf("bulk redrive: %d\n%s", code, page)
	}
	for _, s := range stores {
		if n, _ := s.Pending(); n != 2 {
			t.Errorf("%s: %d pending after the redrive, want 2", s.ID, n)
		}
		ev := storeEvents(t, s, queue.ActionRedrive)
		if len(ev) != 1 || ev[0].Actor != "remote:"+op.PublicKey() || ev[0].Detail["selection"] != "reason=permanent:too_large" || ev[0].Detail["spread"] != console.DefaultBulkSpread.String() {
			t.Fatalf("%s journal: %+v", s.ID, ev)
		}
		wantOnBehalf, wantReason := "console:olga@chain.example", "limit raised"
		if s.ID == "S0003" {
			wantOnBehalf, wantReason = "", "limit raised [by console:olga@chain.example]"
		}
		if ev[0].Detail[dlq.DetailOnBehalfOf] != wantOnBehalf || ev[0].Reason != wantReason {
			t.Errorf("%s journalled on behalf of %q for %q, want %q for %q", s.ID, ev[0].Detail[dlq.DetailOnBehalfOf], ev[0].Reason, wantOnBehalf, wantReason)
		}
	}
	var outcomes []string
	for _, e := range journal(t, h) {
		outcomes = append(outcomes, e.Action+" "+e.Outcome)
		if e.Outcome == console.ActionPartial && (!strings.Contains(e.Detail, "not done at S0009") || e.Keys != 6 || len(e.Stores) != 4) {
			t.Errorf("partial entry: %+v", e)
		}
	}
	if !slices.Equal(outcomes, []string{"bulk_redrive asked", "bulk_redrive partial"}) {
		b, _ := json.Marshal(journal(t, h))
		t.Errorf("hq journal outcomes %v: %s", outcomes, b)
	}
}
