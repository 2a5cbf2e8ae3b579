package service

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/status"
)

// summary is a store's fleet-view entry as its agent writes it, changed
// by set.
func summary(store string, seen time.Time, set func(*command.Summary)) fleet.Entry {
	s := command.Summary{StoreID: store, State: status.Online, Version: "1.4.0", GeneratedAt: seen}
	if set != nil {
		set(&s)
	}
	b, _ := json.Marshal(s)
	return fleet.Entry{Store: store, LastSeen: seen, Value: b}
}

// openSeries are the rxedge_hq_fleet_problem_open series of r, as
// "kind store".
func openSeries(t *testing.T, r *prometheus.Registry) []string {
	t.Helper()
	fams, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fams {
		if f.GetName() != "rxedge_hq_fleet_problem_open" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out = append(out, l["kind"]+" "+l["store"])
		}
	}
	slices.Sort(out)
	return out
}

func problemNames(ps []fleet.Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Kind+" "+p.Store)
	}
	slices.Sort(out)
	return out
}

// TestFleetWatchLook looks at an index of stores quarantining, paused,
// silent, held by their lineage with a replaced file, restored, and
// well: each problem opens once, with one series each; a look that finds
// the same opens nothing; a store that recovers closes its problem once,
// ClearLooks looks later, and its series goes.
func TestFleetWatchLook(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ix := fleet.NewIndex(fleet.IndexOptions{Limits: fleet.Limits{Stale: 2 * time.Minute, Silent: 15 * time.Minute, MaxAge: time.Hour}, Clock: clock})
	ix.Apply(summary("S0001", now, func(s *command.Summary) { s.Quarantined = 2 }))
	ix.Apply(summary("S0002", now, func(s *command.Summary) { s.State = status.Paused }))
	ix.Apply(summary("S0003", now.Add(-20*time.Minute), nil))
	ix.Apply(summary("S0004", now, func(s *command.Summary) { s.Lineage, s.FileOrigin = status.LineageHeld, "replaced" }))
	ix.Apply(summary("S0005", now, func(s *command.Summary) { s.FileOrigin = "restored" }))
	ix.Apply(summary("S0006", now, nil))
	reg := prometheus.NewRegistry()
	book := fleet.NewProblemBook()
	w := NewFleetWatch(ix, book, time.Second, reg)
	w.Clock = clock

	want := []string{"file_replaced S0004", "file_restored S0005", "lineage_held S0004", "paused S0002", "quarantining S0001", "silent S0003"}
	opened, closed := w.Look()
	if got := problemNames(opened); !slices.Equal(got, want) || len(closed) != 0 {
		t.Fatalf("first look opened %v, closed %v; want %v opened", got, problemNames(closed), want)
	}
	if got := openSeries(t, reg); !slices.Equal(got, want) {
		t.Errorf("series %v, want one per open problem %v", got, want)
	}
	if opened, closed := w.Look(); len(opened)+len(closed) != 0 {
		t.Errorf("a second look at the same fleet opened %v, closed %v", problemNames(opened), problemNames(closed))
	}

	now = now.Add(time.Minute)
	ix.Apply(summary("S0001", now, nil))
	// A problem closes once absent for ClearLooks looks, not at the first
	// look without it (a store that flaps keeps one problem open).
	if opened, closed := w.Look(); len(opened)+len(closed) != 0 {
		t.Errorf("the first look without S0001's quarantine opened %v, closed %v", problemNames(opened), problemNames(closed))
	}
	now = now.Add(ClearLooks * time.Second)
	opened, closed = w.Look()
	if len(opened) != 0 || !slices.Equal(problemNames(closed), []string{"quarantining S0001"}) {
		t.Errorf("after S0001's quarantine emptied: opened %v, closed %v", problemNames(opened), problemNames(closed))
	}
	if got := openSeries(t, reg); slices.Contains(got, "quarantining S0001") || len(got) != len(want)-1 {
		t.Errorf("series after the close: %v", got)
	}
	if open := book.List("", true, 0); len(open) != len(want)-1 {
		t.Errorf("%d problems open in the book, want %d", len(open), len(want)-1)
	}
}

// TestFindingsTable reads verification's findings as the console does:
// a store's newest first, every store's, a closed one said to be no
// longer found, and the open ones counted by store.
func TestFindingsTable(t *testing.T) {
	ctx := context.Background()
	_, pool := migratedDB(t, "findings")
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	altered := audit.Finding{Store: "S0001", Log: "L1", Kind: audit.KindAltered, From: 4, To: 4, Sizes: []int64{5}, Detail: "leaf 4 differs"}
	missing := audit.Finding{Store: "S0001", Log: "L1", Kind: audit.KindCheckpointMissing, Sizes: []int64{9}, Detail: "newest checkpoint not archived"}
	dropped := audit.Finding{Store: "S0002", Log: "L2", Kind: audit.KindAltered, From: 2, To: 2, Sizes: []int64{3}, Detail: "leaf 2 differs"}
	for i, fs := range [][]audit.Finding{{altered, missing}, {altered, dropped}} {
		rep := &audit.Report{Incremental: i > 0, Findings: fs, Counts: map[string]int{}}
		if _, _, err := recordPass(ctx, pool, nil, VerifyStateName, []byte{byte(i)}, rep, t0.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	tab := FindingsTable{Pool: pool}
	got, err := tab.Findings(ctx, console.FindingQuery{Store: "S0001"})
	if err != nil || len(got) != 2 || got[0].Kind != audit.KindAltered || got[0].From != 4 || got[0].Source != "verification" ||
		got[1].Kind != audit.KindCheckpointMissing || !strings.Contains(got[1].Detail, "no longer found") {
		t.Errorf("S0001's findings: %+v, %v; want the altered one (seen last) and the closed missing checkpoint", got, err)
	}
	if all, err := tab.Findings(ctx, console.FindingQuery{Limit: 2}); err != nil || len(all) != 2 {
		t.Errorf("every store's findings, two at most: %d, %v", len(all), err)
	}
	counts, err := tab.CountByStore(ctx, []string{"S0001", "S0002", "S0003"})
	if err != nil || len(counts) != 2 || counts["S0001"] != 1 || counts["S0002"] != 1 {
		t.Errorf("open findings by store: %v, %v; want S0001 1, S0002 1", counts, err)
	}
}

// TestSettingsCheckReportsEveryProblem checks settings with a problem in
// every section at once: each is reported, naming the file and its
// field, and no secret in the file (a password in the database URL) is
// repeated.
func TestSettingsCheckReportsEveryProblem(t *testing.T) {
	var s Settings
	s.Postgres.URL = "postgres://hq:hunter2-secret@db.example:notaport/rxedge"
	s.Postgres.Password = Secret{File: "/etc/pg", Credential: "pg"}
	s.NATS.Audit.Password = Secret{Credential: "../audit"}
	s.NATS.Witness.Password = Secret{Credential: "witness"}
	s.Sink.Batch = -1
	s.Verify.Interval = -time.Second
	s.Fleet.Stale, s.Fleet.Silent = 10*time.Minute, time.Minute
	s.StopTimeout = -time.Second
	s.Listen = "0.0.0.0:9467"
	s.Console = &console.Settings{}
	off := false
	s.Fleet.Enabled = &off
	err := s.Check("hq.yaml", func(string) string { return "" })
	if err == nil {
		t.Fatal("settings with a problem in every section passed")
	}
	text := err.Error()
	for _, field := range []string{"postgres.url", "postgres.password", "nats.servers", "nats.partitions", "nats.audit.password.credential",
		"nats.witness.password.credential", "roster", "witness.signing_key", "sink.batch", "verify.interval", "fleet.silent", "stop_timeout", "console", "listen"} {
		if !strings.Contains(text, "hq.yaml: "+field+":") {
			t.Errorf("no problem of %s in:\n%s", field, text)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "hq.yaml: ") {
			t.Errorf("a problem that does not name the file: %q", line)
		}
	}
	if strings.Contains(text, "hunter2") {
		t.Errorf("the problems repeat the URL's password:\n%s", text)
	}
}

// TestListenOffLoopbackNeedsAToken: hq's /metrics and /readyz name every
// store with an open finding or problem, so the listener leaves loopback
// only with a token, which they then ask for; /healthz answers anyone.
func TestListenOffLoopbackNeedsAToken(t *testing.T) {
	s := Settings{Listen: "0.0.0.0:9467"}
	if err := s.Check("hq.yaml", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "hq.yaml: listen: 0.0.0.0:9467 is not a loopback address") {
		t.Errorf("off loopback without a token: %v", err)
	}
	s = Settings{Listen: "0.0.0.0:9467", ListenToken: Secret{File: "/etc/rxedge/hq-metrics.token"}}
	if err := s.Check("hq.yaml", func(string) string { return "" }); err != nil && strings.Contains(err.Error(), "hq.yaml: listen:") {
		t.Errorf("off loopback with a token: %v", err)
	}
	h := bearerOnly("s3cret-token-0123456789", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "", 401}, {"/readyz", "Bearer wrong", 401}, {"/metrics", "Bearer s3cret-token-0123456789", 200}, {"/healthz", "", 200},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("GET %s with %q: %d, want %d", c.path, c.auth, rec.Code, c.want)
		}
	}
}
