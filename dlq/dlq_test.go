package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/dlqtest"
)

func TestMatchReason(t *testing.T) {
	tests := []struct {
		filter, reason string
		want           bool
	}{
		{"", "permanent:too_large", true},
		{"permanent:too_large", "permanent:too_large", true},
		{"permanent:too_large", "exhausted:too_large", false},
		{"permanent", "permanent:conflict", true},
		{"permanent:", "permanent:conflict", true},
		{"permanent", "exhausted:timeout", false},
		{"exhausted", "exhausted:timeout", true},
		{"too_large", "permanent:too_large", true},
		{"too_large", "exhausted:too_large", true},
		{"too_large", "permanent:conflict", false},
		{"transient:timeout", "exhausted:transient:timeout", true},
		{"exhausted:transient:timeout", "exhausted:transient:timeout", true},
		{"perm", "permanent:too_large", false},
	}
	for _, tt := range tests {
		if got := matchReason(tt.filter, tt.reason); got != tt.want {
			t.Errorf("matchReason(%q, %q) = %v, want %v", tt.filter, tt.reason, got, tt.want)
		}
	}
}

func TestListFiltersAndOrders(t *testing.T) {
	f := newFixture(t)
	t0 := f.clk.Now()
	keys := f.quarantine(t,
		spec{id: "A", reason: "permanent:too_large"},                // t0
		spec{id: "B", reason: "exhausted:timeout", schedule: "CII"}, // t0+1m
		spec{id: "C", reason: "permanent:conflict"},                 // t0+2m
		spec{id: "D", reason: "exhausted:too_large"},                // t0+3m
		spec{id: "E", reason: "permanent:too_large"},                // t0+4m
	)
	f.enqueue(t, spec{id: "pending-one"}) // not quarantined: never listed

	tests := []struct {
		name    string
		filter  Filter
		want    []int // indexes into keys, in order
		matched int
	}{
		{"all", Filter{}, []int{0, 1, 2, 3, 4}, 5},
		{"exact reason", Filter{Reason: "permanent:too_large"}, []int{0, 4}, 2},
		{"class", Filter{Reason: "permanent"}, []int{0, 2, 4}, 3},
		{"kind in either class", Filter{Reason: "too_large"}, []int{0, 3, 4}, 3},
		{"case is ignored", Filter{Reason: "EXHAUSTED"}, []int{1, 3}, 2},
		{"since inclusive", Filter{Since: t0.Add(2 * time.Minute)}, []int{2, 3, 4}, 3},
		{"until exclusive", Filter{Until: t0.Add(2 * time.Minute)}, []int{0, 1}, 2},
		{"window", Filter{Since: t0.Add(time.Minute), Until: t0.Add(4 * time.Minute)}, []int{1, 2, 3}, 3},
		{"limit keeps the oldest", Filter{Limit: 2}, []int{0, 1}, 5},
		{"limit with reason", Filter{Reason: "too_large", Limit: 2}, []int{0, 3}, 3},
		{"nothing", Filter{Reason: "no_such_kind"}, []int{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := f.svc.List(tt.filter)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			var got []string
			for _, it := range res.Items {
				got = append(got, it.Key)
			}
			want := []string{}
			for _, i := range tt.want {
				want = append(want, keys[i])
			}
			if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Errorf("keys = %v, want %v", got, want)
			}
			if res.Matched != tt.matched {
				t.Errorf("matched = %d, want %d", res.Matched, tt.matched)
			}
		})
	}

	res, err := f.svc.List(Filter{Reason: "exhausted:timeout"})
	if err != nil || len(res.Items) != 1 {
		t.Fatalf("List = %+v, %v", res, err)
	}
	it := res.Items[0]
	if it.MovementID != "B" || it.Class != "controlled" || it.Schedule != "CII" || it.Attempts != 1 ||
		it.ErrorKind != "permanent:timeout" || it.ConnState != "online" || it.AgentVersion != "1.2.3-test" ||
		!it.QuarantinedAt.Equal(t0.Add(time.Minute)) || it.LastFailure == nil || it.FirstFailure == nil {
		t.Errorf("item = %+v", it)
	}
}

func TestListRefusesBadFilters(t *testing.T) {
	f := newFixture(t)
	now := f.clk.Now()
	tests := []struct {
		name   string
		filter Filter
		field  string
	}{
		{"reason with spaces", Filter{Reason: "too large"}, "reason"},
		{"reason colon only", Filter{Reason: ":"}, "reason"},
		{"negative limit", Filter{Limit: -1}, "limit"},
		{"since after until", Filter{Since: now, Until: now.Add(-time.Hour)}, "since"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.svc.List(tt.filter)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != tt.field {
				t.Fatalf("error = %v, want an InputError on %s", err, tt.field)
			}
		})
	}
}

func TestShow(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A", rxRef: "RX-1"})
	pendingKey, _ := f.enqueue(t, spec{id: "P"})

	d, err := f.svc.Show(keys[0], false, "local:test")
	if err != nil {
		t.Fatalf("Show: %v", err)
	}
	if d.Payload != nil || d.Key != keys[0] || d.StoreID != testStore || len(d.Digest) != 64 {
		t.Errorf("Show without payload = %+v", d)
	}
	d, err = f.svc.Show(strings.ToUpper(keys[0]), true, "local:test")
	if err != nil {
		t.Fatalf("Show upper-case key: %v", err)
	}
	if !strings.Contains(string(d.Payload), `"rx_ref":"RX-1"`) {
		t.Errorf("payload = %s, want the movement", d.Payload)
	}

	tests := []struct {
		name  string
		key   string
		state string // "" for an InputError
	}{
		{"unknown key", strings.Repeat("0", 32), StateUnknown},
		{"pending key", pendingKey, "pending"},
		{"no such movement_id", "not-a-key", StateUnknown},
		{"no such key prefix", "ffff0000", StateUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.svc.Show(tt.key, false, "local:test")
			if tt.state == "" {
				var ie *InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.key) {
					t.Fatalf("error = %v, want an InputError naming %q", err, tt.key)
				}
				return
			}
			if tt.key == "abc" {
				return
			}
			var ke *KeyError
			if !errors.As(err, &ke) || ke.State != tt.state || !errors.Is(err, ErrNotQuarantined) {
				t.Fatalf("error = %v, want a KeyError in state %s", err, tt.state)
			}
		})
	}
}

// TestShowFinds: show takes a movement_id or a unique start of a key; an
// ambiguous start says how many it matches.
func TestShowFinds(t *testing.T) {
	f := newFixture(t)
	// Two movement ids whose keys share their first MinKeyPrefix characters.
	seen := map[string]string{}
	var a, b string
	for i := 0; a == ""; i++ {
		id := fmt.Sprintf("M-%d", i)
		p := movement.KeyString(testStore, id)[:MinKeyPrefix]
		if other, ok := seen[p]; ok {
			a, b = other, id
		}
		seen[p] = id
	}
	keys := f.quarantine(t, spec{id: a}, spec{id: b}, spec{id: "POS-77"})
	common := keys[0][:MinKeyPrefix]

	tests := []struct {
		name, ref, key, err string
	}{
		{"movement_id", "POS-77", keys[2], ""},
		{"whole key", keys[1], keys[1], ""},
		{"unique prefix", keys[0][:12], keys[0], ""},
		{"upper-case prefix", strings.ToUpper(keys[2][:8]), keys[2], ""},
		{"ambiguous prefix", common, "", `"` + common + `" is ambiguous: the keys of 2 quarantined movements start with it`},
		{"short prefix", keys[2][:3], "", "a key prefix needs at least 4 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := f.svc.Show(tt.ref, false, "local:test")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil || d.Key != tt.key {
				t.Fatalf("got %q, %v; want %s", d.Key, err, tt.key)
			}
		})
	}
}

// TestSummarize counts by reason and class, most first.
func TestSummarize(t *testing.T) {
	f := newFixture(t)
	f.quarantine(t,
		spec{id: "A", reason: "permanent:too_large", schedule: "CII"},
		spec{id: "B", reason: "exhausted:timeout"},
		spec{id: "C", reason: "exhausted:timeout", schedule: "CIV"},
		spec{id: "D", reason: "exhausted:timeout"},
	)
	sum, err := f.svc.Summarize(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := Summary{Total: ClassCount{Controlled: 2, Ordinary: 2, Total: 4}, Reasons: []ReasonCount{
		{"exhausted:timeout", ClassCount{Controlled: 1, Ordinary: 2, Total: 3}},
		{"permanent:too_large", ClassCount{Controlled: 1, Ordinary: 0, Total: 1}},
	}}
	if fmt.Sprint(sum) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", sum, want)
	}
	sum, err = f.svc.Summarize(Filter{Reason: "permanent", Limit: 1})
	if err != nil || sum.Total.Total != 1 || len(sum.Reasons) != 1 {
		t.Errorf("by reason: %+v %v", sum, err)
	}
}

func TestRedriveSpreadsDueTimesInsideTheWindow(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, many("spread", 200)...)
	f.clk.Add(time.Hour)
	start := f.clk.Now()
	const window = 10 * time.Minute

	res, err := f.svc.Redrive(context.Background(), RedriveRequest{
		Selection: Selection{All: true}, Actor: "local:alice", ReasonText: "central fixed the size limit", Spread: window,
	})
	if err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	if len(res.Redriven) != len(keys) || len(res.NotFound) != 0 {
		t.Fatalf("redriven %d, not found %v; want %d, none", len(res.Redriven), res.NotFound, len(keys))
	}
	distinct := make(map[time.Time]bool)
	for _, r := range res.Redriven {
		if r.DueAt == nil || r.DueAt.Before(start) || !r.DueAt.Before(start.Add(window)) {
			t.Fatalf("key %s due at %v, want in [%v, %v)", r.Key, r.DueAt, start, start.Add(window))
		}
		distinct[*r.DueAt] = true
	}
	if len(distinct) < len(keys)/2 {
		t.Errorf("%d distinct due times for %d movements: not spread", len(distinct), len(keys))
	}

	// The queue agrees: every movement is pending, due inside the window,
	// with its attempts reset.
	for _, r := range dlqtest.Pending(t, f.q) {
		if r.Attempts != 0 || r.NextAt.Before(start) || !r.NextAt.Before(start.Add(window)) {
			t.Errorf("pending %s: attempts %d, due %v", r.KeyString(), r.Attempts, r.NextAt)
		}
	}
	// Nothing is due before its time; everything is due by the window's end.
	if early, _ := f.q.Lease(start, 1000); len(early) == len(keys) {
		t.Errorf("all %d due at the start of the window", len(early))
	}
	if all, _ := f.q.Lease(start.Add(window), 1000); len(all) == 0 {
		t.Errorf("nothing due at the end of the window")
	}
	evs := f.events(t, queue.ActionRedrive)
	if len(evs) != 1 || evs[0].Actor != "local:alice" || evs[0].Reason != "central fixed the size limit" ||
		evs[0].Count != len(keys) || evs[0].Detail["spread"] != "10m0s" || evs[0].Detail["selection"] != "all" {
		t.Errorf("journal = %+v", evs)
	}
	f.verify(t)
}

func TestRedriveWithoutSpreadIsDueNow(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, many("now", 3)...)
	res, err := f.svc.Redrive(context.Background(), RedriveRequest{Selection: Selection{Keys: keys}, ReasonText: "retry"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Redriven {
		if !r.DueAt.Equal(f.clk.Now()) {
			t.Errorf("%s due %v, want now %v", r.Key, r.DueAt, f.clk.Now())
		}
	}
	if evs := f.events(t, queue.ActionRedrive); len(evs) != 1 || evs[0].Actor != DefaultActor {
		t.Errorf("journal = %+v, want actor %s", evs, DefaultActor)
	}
}

func TestRedriveSelections(t *testing.T) {
	tests := []struct {
		name string
		sel  func(keys []string, pending string) Selection
		want []int // indexes of keys redriven, in order
		miss []Missing
	}{
		{"keys", func(k []string, _ string) Selection { return Selection{Keys: []string{k[3], k[1]}} }, []int{3, 1}, nil},
		{"duplicate keys once", func(k []string, _ string) Selection { return Selection{Keys: []string{k[2], k[2]}} }, []int{2}, nil},
		{"all", func([]string, string) Selection { return Selection{All: true} }, []int{0, 1, 2, 3}, nil},
		{"reason", func([]string, string) Selection { return Selection{Reason: "exhausted"} }, []int{1, 3}, nil},
		{"oldest", func([]string, string) Selection { return Selection{Oldest: 3} }, []int{0, 1, 2}, nil},
		{"reason and oldest", func([]string, string) Selection { return Selection{Reason: "exhausted", Oldest: 1} }, []int{1}, nil},
		{"keys not quarantined", func(k []string, p string) Selection {
			return Selection{Keys: []string{k[0], p, strings.Repeat("a", 32)}}
		}, []int{0}, []Missing{{Key: "pending", State: "pending"}, {Key: strings.Repeat("a", 32), State: StateUnknown}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, dry := range []bool{true, false} {
				f := newFixture(t)
				keys := f.quarantine(t,
					spec{id: "A", reason: "permanent:too_large"},
					spec{id: "B", reason: "exhausted:timeout"},
					spec{id: "C", reason: "permanent:conflict"},
					spec{id: "D", reason: "exhausted:too_large"},
				)
				pending, _ := f.enqueue(t, spec{id: "P"})
				res, err := f.svc.Redrive(context.Background(), RedriveRequest{Selection: tt.sel(keys, pending), Actor: "local:bob", ReasonText: "test", DryRun: dry})
				if err != nil {
					t.Fatalf("dry %v: Redrive: %v", dry, err)
				}
				var got, want []string
				for _, r := range res.Redriven {
					got = append(got, r.Key)
					if (r.DueAt == nil) != dry || r.Reason == "" {
						t.Errorf("dry %v: %+v", dry, r)
					}
				}
				for _, i := range tt.want {
					want = append(want, keys[i])
				}
				if !slices.Equal(got, want) {
					t.Errorf("dry %v: redriven %v, want %v", dry, got, want)
				}
				var wantMiss []Missing
				for _, m := range tt.miss {
					if m.Key == "pending" {
						m.Key = pending
					}
					wantMiss = append(wantMiss, m)
				}
				if !slices.Equal(res.NotFound, wantMiss) {
					t.Errorf("dry %v: not found %v, want %v", dry, res.NotFound, wantMiss)
				}
				quarantined := 0
				for _, k := range keys {
					if f.state(t, k) == queue.Quarantined {
						quarantined++
					}
				}
				wantQ := len(keys)
				if !dry {
					wantQ -= len(tt.want)
				}
				if quarantined != wantQ {
					t.Errorf("dry %v: %d still quarantined, want %d", dry, quarantined, wantQ)
				}
				if n := len(f.events(t, queue.ActionRedrive)); dry && n != 0 {
					t.Errorf("dry run journalled %d events", n)
				}
				f.verify(t)
			}
		})
	}
}

func TestRedriveRefusesBadRequests(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A"})
	tests := []struct {
		name  string
		rq    RedriveRequest
		field string
		names string // text the error must contain
	}{
		{"no reason text", RedriveRequest{Selection: Selection{All: true}}, "reason_text", "--reason-text"},
		{"blank reason text", RedriveRequest{Selection: Selection{All: true}, ReasonText: "  "}, "reason_text", "--reason-text"},
		{"no selection", RedriveRequest{ReasonText: "x"}, "selection", "--all"},
		{"two selections", RedriveRequest{Selection: Selection{All: true, Keys: keys}, ReasonText: "x"}, "selection", "not several"},
		{"all and reason", RedriveRequest{Selection: Selection{All: true, Reason: "permanent"}, ReasonText: "x"}, "selection", "not several"},
		{"negative oldest", RedriveRequest{Selection: Selection{Oldest: -2}, ReasonText: "x"}, "oldest", "--oldest"},
		{"bad reason filter", RedriveRequest{Selection: Selection{Reason: "no such"}, ReasonText: "x"}, "reason", "--reason"},
		{"bad key", RedriveRequest{Selection: Selection{Keys: []string{keys[0], "xyz-not-a-key"}}, ReasonText: "x"}, "keys", `"xyz-not-a-key"`},
		{"negative spread", RedriveRequest{Selection: Selection{All: true}, ReasonText: "x", Spread: -time.Second}, "spread", "--spread"},
		{"spread too long", RedriveRequest{Selection: Selection{All: true}, ReasonText: "x", Spread: 25 * time.Hour}, "spread", "--spread"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.svc.Redrive(context.Background(), tt.rq)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != tt.field || !strings.Contains(err.Error(), tt.names) {
				t.Fatalf("error = %v, want an InputError on %s naming %s", err, tt.field, tt.names)
			}
			if f.state(t, keys[0]) != queue.Quarantined {
				t.Fatalf("the movement left the quarantine")
			}
		})
	}
	if n := len(f.events(t, queue.ActionRedrive)); n != 0 {
		t.Errorf("%d redrive events journalled by refused requests", n)
	}
}

func TestRedriveInChunksReportsProgress(t *testing.T) {
	f := newFixture(t)
	f.svc.chunk = 4
	keys := f.quarantine(t, many("chunk", 10)...)
	var calls []Progress
	res, err := f.svc.Redrive(context.Background(), RedriveRequest{
		Selection: Selection{All: true}, ReasonText: "chunks", Spread: time.Minute,
		Progress: func(done, total int) { calls = append(calls, Progress{done, total}) },
	})
	if err != nil || len(res.Redriven) != len(keys) {
		t.Fatalf("Redrive = %d redriven, %v", len(res.Redriven), err)
	}
	want := []Progress{{4, 10}, {8, 10}, {10, 10}}
	if !slices.Equal(calls, want) {
		t.Errorf("progress %v, want %v", calls, want)
	}
	evs := f.events(t, queue.ActionRedrive)
	if len(evs) != 3 || evs[0].Detail["batch"] != "1/3" || evs[2].Detail["batch"] != "3/3" || evs[2].Count != 2 {
		t.Errorf("journal = %+v", evs)
	}
	f.verify(t)
}

func TestRedriveStopsWhenCancelled(t *testing.T) {
	f := newFixture(t)
	f.svc.chunk = 2
	f.quarantine(t, many("cancel", 6)...)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := f.svc.Redrive(ctx, RedriveRequest{
		Selection: Selection{All: true}, ReasonText: "cancel",
		Progress: func(done, total int) { cancel() },
	})
	if !errors.Is(err, context.Canceled) || len(res.Redriven) != 2 {
		t.Fatalf("Redrive = %d redriven, %v; want 2 and context.Canceled", len(res.Redriven), err)
	}
	f.verify(t)
}

func TestRedriveOnReadOnlyQueue(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A"})
	ro := f.reopenReadOnly(t)
	svc := New(ro)
	if res, err := svc.Redrive(context.Background(), RedriveRequest{Selection: Selection{Keys: keys}, ReasonText: "x", DryRun: true}); err != nil || len(res.Redriven) != 1 {
		t.Errorf("dry run on a read-only file = %+v, %v", res, err)
	}
	if _, err := svc.Redrive(context.Background(), RedriveRequest{Selection: Selection{Keys: keys}, ReasonText: "x"}); !errors.Is(err, queue.ErrReadOnly) {
		t.Errorf("redrive on a read-only file: %v, want ErrReadOnly", err)
	}
}

func TestAudit(t *testing.T) {
	f := newFixture(t)
	t0 := f.clk.Now()
	keys := f.quarantine(t, spec{id: "A"}, spec{id: "B"})
	if _, err := f.svc.Redrive(context.Background(), RedriveRequest{Selection: Selection{Keys: keys[:1]}, Actor: "local:carol", ReasonText: "fixed"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		filter  AuditFilter
		actions []string
	}{
		{"all", AuditFilter{}, []string{"quarantine", "quarantine", "redrive"}},
		{"action", AuditFilter{Actions: []string{"REDRIVE"}}, []string{"redrive"}},
		{"since", AuditFilter{Since: t0.Add(time.Minute)}, []string{"quarantine", "redrive"}},
		{"until", AuditFilter{Until: t0.Add(time.Minute)}, []string{"quarantine"}},
		{"key", AuditFilter{Key: keys[0]}, []string{"quarantine", "redrive"}},
		{"key prefix, upper case", AuditFilter{Key: strings.ToUpper(keys[1][:10])}, []string{"quarantine"}},
		{"actor", AuditFilter{Actor: "CAROL"}, []string{"redrive"}},
		{"actor and key", AuditFilter{Actor: "carol", Key: keys[1]}, nil},
	}
	if _, err := f.svc.Audit(AuditFilter{Key: "POS-1"}); err == nil || !strings.Contains(err.Error(), "--key") {
		t.Errorf("a key that is no key: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := f.svc.Audit(tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range res.Events {
				got = append(got, e.Action)
			}
			if !slices.Equal(got, tt.actions) {
				t.Errorf("actions %v, want %v", got, tt.actions)
			}
		})
	}
}

// TestShowPayloadIsJournalled: viewing a payload is an access to the
// records (DESIGN P8): it is journalled with who, before the payload is
// shown; on a read-only file it is refused.
func TestShowPayloadIsJournalled(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "A", rxRef: "RX-1"})
	views := func() []queue.Event {
		var out []queue.Event
		f.q.Events(time.Time{}, func(e queue.Event) bool {
			if e.Action == queue.ActionView {
				out = append(out, e)
			}
			return true
		})
		return out
	}
	if _, err := f.svc.Show(keys[0], false, "local:alice"); err != nil {
		t.Fatal(err)
	}
	if v := views(); len(v) != 0 {
		t.Fatalf("a show without payload was journalled: %+v", v)
	}
	if _, err := f.svc.Show(keys[0], true, "local:alice"); err != nil {
		t.Fatal(err)
	}
	v := views()
	if len(v) != 1 || v[0].Actor != "local:alice" || len(v[0].Keys) != 1 || v[0].Keys[0] != keys[0] {
		t.Fatalf("view journalled as %+v", v)
	}

	ro := f.reopenReadOnly(t)
	d, err := New(ro).Show(keys[0], true, "local:alice")
	var ie *InputError
	if !errors.As(err, &ie) || d.Payload != nil {
		t.Fatalf("payload on a read-only file: %+v, %v", d, err)
	}
}

// TestRedriveTakesShowsReferences: redrive takes what show takes — a
// whole key, a key prefix or a movement_id; a reference that names no
// quarantined movement, or a prefix too short, refuses the request and
// changes nothing.
func TestRedriveTakesShowsReferences(t *testing.T) {
	f := newFixture(t)
	keys := f.quarantine(t, spec{id: "POS-A"}, spec{id: "POS-B"}, spec{id: "POS-C"})
	for _, refs := range [][]string{{"POS-A", "no-such-id"}, {keys[2][:2]}} {
		_, err := f.svc.Redrive(context.Background(), RedriveRequest{Selection: Selection{Keys: refs}, ReasonText: "x"})
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), refs[len(refs)-1]) {
			t.Errorf("redrive %v: %v, want a refusal naming %s", refs, err, refs[len(refs)-1])
		}
	}
	for _, k := range keys {
		if f.state(t, k) != queue.Quarantined {
			t.Fatal("a refused redrive changed something")
		}
	}
	res, err := f.svc.Redrive(context.Background(), RedriveRequest{
		Selection: Selection{Keys: []string{"POS-A", keys[1][:8]}}, ReasonText: "by reference",
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.Redriven {
		got = append(got, r.Key)
	}
	slices.Sort(got)
	want := []string{keys[0], keys[1]}
	slices.Sort(want)
	if !slices.Equal(got, want) || len(res.NotFound) != 0 {
		t.Fatalf("redriven %v, not found %+v; want %v", got, res.NotFound, want)
	}
	if f.state(t, keys[2]) != queue.Quarantined {
		t.Error("an unnamed movement was redriven")
	}
}

// TestRedriveConflictGuidance: redriving a movement quarantined for a
// conflict says why it will come back and what to do instead, in a dry
// run too; other reasons get no such note.
func TestRedriveConflictGuidance(t *testing.T) {
	f := newFixture(t)
	f.quarantine(t, spec{id: "C1", reason: ReasonConflict}, spec{id: "T1", reason: "exhausted:timeout"})
	for _, dry := range []bool{true, false} {
		res, err := f.svc.Redrive(context.Background(), RedriveRequest{Selection: Selection{All: true}, ReasonText: "try", DryRun: dry})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Guidance) != 1 || !strings.Contains(res.Guidance[0], "1 of these movement(s)") || !strings.Contains(res.Guidance[0], "new movement_id") || !strings.Contains(res.Guidance[0], "agent dlq purge") {
			t.Errorf("dry run %v: guidance %q", dry, res.Guidance)
		}
	}
	f.quarantine(t, spec{id: "T2", reason: "exhausted:timeout"})
	res, _ := f.svc.Redrive(context.Background(), RedriveRequest{Selection: Selection{Reason: "exhausted"}, ReasonText: "try"})
	if len(res.Guidance) != 0 {
		t.Errorf("guidance without a conflict: %q", res.Guidance)
	}
}
