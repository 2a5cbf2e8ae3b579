package metrics

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
)

// gather returns the agent's metric families by name, from a real data
// file and a connection that last synced at lastSync and has problem.
func gather(t *testing.T, conn status.Connection) map[string]*dto.MetricFamily {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: "S1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	m := New(q)
	m.WatchConnection(func() status.Connection { return conn })
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// TestSeriesFromStart: build info, last sync, free disk, refusal and
// central error counters and every series of a bounded label set exist before anything happened.
func TestSeriesFromStart(t *testing.T) {
	last := time.Unix(1700000000, 0)
	fams := gather(t, status.Connection{State: status.Offline, LastSyncAt: &last, Problem: &status.ConnProblem{Reason: status.ReasonAuth}})

	series := func(name, label string) map[string]float64 {
		t.Helper()
		f := fams[name]
		if f == nil {
			t.Fatalf("%s is not exported", name)
		}
		got := map[string]float64{}
		for _, m := range f.GetMetric() {
			got[labels(m)[label]] = value(m)
		}
		return got
	}
	outcomes := series("rxedge_sync_outcomes_total", "outcome")
	for _, k := range OutcomeKinds {
		if v, ok := outcomes[k]; !ok || v != 0 {
			t.Errorf("outcome %q: got %v (present %v), want 0 from the start", k, v, ok)
		}
	}
	causes := series("rxedge_ingest_refused_requests_total", "cause")
	for _, c := range RefusalCauses {
		if _, ok := causes[c]; !ok {
			t.Errorf("refused requests: cause %q missing", c)
		}
	}
	if got := len(fams["rxedge_refused_tokens_total"].GetMetric()); got != 4 {
		t.Errorf("refused tokens: %d series, want 4 (two listeners, two causes)", got)
	}
	problems := series("rxedge_connection_problem", "reason")
	for _, r := range status.ConnReasons {
		want := 0.0
		if r == status.ReasonAuth {
			want = 1
		}
		if v, ok := problems[r]; !ok || v != want {
			t.Errorf("connection problem %q: got %v (present %v), want %v", r, v, ok, want)
		}
	}
	centralErrors := series("rxedge_central_errors_total", "reason")
	for _, r := range status.ConnReasons {
		if v, ok := centralErrors[r]; !ok || v != 0 {
			t.Errorf("central errors %q: got %v (present %v), want 0 from the start", r, v, ok)
		}
	}
	if v := series("rxedge_last_sync_timestamp_seconds", "")[""]; v != 1700000000 {
		t.Errorf("last sync: got %v, want 1700000000", v)
	}
	if v := series("rxedge_data_dir_free_bytes", "")[""]; v <= 0 {
		t.Errorf("free disk: got %v, want the free bytes", v)
	}
	info := fams["rxedge_build_info"].GetMetric()
	if len(info) != 1 || value(info[0]) != 1 {
		t.Fatalf("build info: %v", info)
	}
	l := labels(info[0])
	if l["version"] == "" || !strings.HasPrefix(l["go"], "go") {
		t.Errorf("build info labels: %v", l)
	}
	if _, ok := l["commit"]; !ok {
		t.Errorf("build info has no commit label: %v", l)
	}
}

// TestOutcomeKindsCoverTheSender: every kind the sender's verdicts can
// carry is initialised. The kinds are read from its source, since this
// package may not import it.
func TestOutcomeKindsCoverTheSender(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "sync", "*.go"))
	var found [][][]byte
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, regexp.MustCompile(`verdict\{[^}]*kind: "([^"]+)"`).FindAllSubmatch(src, -1)...)
	}
	if len(found) < 10 {
		t.Fatalf("only %d verdict kinds found in package sync: update this test", len(found))
	}
	for _, k := range found {
		if !slices.Contains(OutcomeKinds, string(k[1])) {
			t.Errorf("outcome kind %q of the sender is not in OutcomeKinds", k[1])
		}
	}
}

// TestShippedConfigsUseExportedMetrics: every metric the alert rules,
// their tests and the Grafana dashboard name is one the agent exports.
func TestShippedConfigsUseExportedMetrics(t *testing.T) {
	fams := gather(t, status.Connection{State: status.Online})
	files, _ := filepath.Glob(filepath.Join("..", "configs", "grafana", "*.json"))
	files = append(files, filepath.Join("..", "configs", "prometheus", "rxedge-alerts.yml"), filepath.Join("..", "configs", "prometheus", "rxedge-alerts.test.yml"))
	name := regexp.MustCompile(`rxedge_[a-z0-9_]+`)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		names := name.FindAllString(string(b), -1)
		if len(names) == 0 {
			t.Errorf("%s names no rxedge metric", file)
		}
		for _, n := range names {
			if fams[n] != nil {
				continue
			}
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
			if f := fams[base]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM {
				continue
			}
			t.Errorf("%s names %s, which the agent does not export", file, n)
		}
	}
}

// TestAlertRules runs the rules' unit tests with promtool (the CI
// installs it: Debian's package prometheus).
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (apt-get install prometheus); .ci/run installs it")
	}
	dir := filepath.Join("..", "configs", "prometheus")
	for _, args := range [][]string{{"check", "rules", "rxedge-alerts.yml"}, {"test", "rules", "rxedge-alerts.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
