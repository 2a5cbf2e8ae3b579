package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// TestSinkCLI runs hq sink and hq report
// against a real PostgreSQL and central: the schema migrated, movements
// written once, verified, a tampered row found, the views printed as a
// table, JSON and CSV, the settings file and RXEDGE_SINK_* honoured, and
// no password in anything printed.
func TestSinkCLI(t *testing.T) {
	pg := pgtest.Start(t)
	const pw = "s3cret-sink-pw"
	pg.Exec(t, "postgres", `CREATE ROLE sinkowner LOGIN PASSWORD '`+pw+`'`)
	pg.Exec(t, "postgres", `CREATE DATABASE sinkcli OWNER sinkowner`)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pg.password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := pg.URL("sinkowner", "", "sinkcli")
	pgArgs := []string{"--postgres", url, "--postgres-password-file", pwFile}

	srv := natstest.StartHub(t)
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, body := range []string{
		`{"movement_id":"r1","type":"receive","ndc":"00002-3227-30","quantity":"100","unit":"EA","occurred_at":"2026-03-01T10:00:00Z","schedule":"CII","dea_form_222":"X1234567"}`,
		`{"movement_id":"d1","type":"dispense","ndc":"00002-3227-30","quantity":"30","unit":"EA","occurred_at":"2026-03-02T10:00:00Z","schedule":"CII","rx_ref":"RX-77"}`,
		`{"movement_id":"w1","type":"waste","ndc":"00002-3227-30","quantity":"0.5","unit":"EA","occurred_at":"2026-03-03T10:00:00Z","schedule":"CII"}`,
	} {
		p, es := movement.Prepare([]byte(body), "S0001", time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC))
		if es != nil {
			t.Fatal(es)
		}
		m := central.Message{Store: "S0001", Key: p.KeyString(), Digest: fmt.Sprintf("%x", p.Digest), Seq: uint64(i + 1), Schedule: p.Schedule, EnqueuedAt: time.Now(), Payload: p.Payload}
		if _, err := js.PublishMsg(ctx, m.Msg()); err != nil {
			t.Fatal(err)
		}
	}
	waitArchive(t, js, 3)

	out := mustCLI(t, append([]string{"sink", "--migrate-only"}, pgArgs...)...)
	if v := sink.SchemaVersion(); !strings.Contains(out, fmt.Sprintf("schema at version %d (applied %d migration(s))", v, v)) {
		t.Errorf("--migrate-only: %q", out)
	}
	out = mustCLI(t, append([]string{"sink", "--until-caught-up", "--json", "--server", srv.URL()}, pgArgs...)...)
	var res struct {
		Streams []struct {
			Name     string `json:"name"`
			Position uint64 `json:"position"`
			Rows     uint64 `json:"rows"`
		} `json:"streams"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Streams) != 1 || res.Streams[0].Rows != 3 || res.Streams[0].Position != 3 {
		t.Fatalf("sink --until-caught-up --json: %v\n%s", err, out)
	}
	out = mustCLI(t, append([]string{"sink", "--verify", "--server", srv.URL()}, pgArgs...)...)
	if !strings.Contains(out, "RX_ARCHIVE: archive 1..3, position 3, checked 3, lag 0, missing 0, different 0") {
		t.Errorf("--verify: %q", out)
	}

	// The views.
	out = mustCLI(t, append([]string{"report", "balances", "--json"}, pgArgs...)...)
	var bal []map[string]string
	if err := json.Unmarshal([]byte(out), &bal); err != nil || len(bal) != 1 || bal[0]["balance"] != "69.500000" || bal[0]["store_id"] != "S0001" {
		t.Errorf("report balances --json: %v\n%s", err, out)
	}
	out = mustCLI(t, append([]string{"report", "schedule-ii", "--store", "S0001", "--from", "2026-03-01", "--to", "2026-03-03", "--csv"}, pgArgs...)...)
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) != 3 || recs[0][9] != "dea_form_222" || recs[1][9] != "X1234567" || recs[2][4] != "dispense" {
		t.Errorf("report schedule-ii --csv: %v\n%s", err, out)
	}
	out = mustCLI(t, append([]string{"report", "rx", "--rx-ref", "RX-77"}, pgArgs...)...)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "dispense") {
		t.Errorf("report rx: %q", out)
	}
	out = mustCLI(t, append([]string{"report", "inventory", "--store", "S0001", "--json"}, pgArgs...)...)
	var inv []map[string]string
	if err := json.Unmarshal([]byte(out), &inv); err != nil || len(inv) != 3 || inv[1]["balance"] != "70.000000" || inv[2]["balance"] != "69.500000" {
		t.Errorf("report inventory: %v\n%s", err, out)
	}

	// The settings file, and the environment over it.
	conf := filepath.Join(dir, "sink.yaml")
	os.WriteFile(conf, []byte("postgres:\n  url: "+pg.URL("nobody", "", "nodb")+"\n  password_file: "+pwFile+"\nnats:\n  servers: "+srv.URL()+"\nbatch: 100\n"), 0o600)
	t.Setenv("RXEDGE_SINK_POSTGRES", url)
	out = mustCLI(t, "sink", "--config", conf, "--verify")
	if !strings.Contains(out, "0 with a difference") {
		t.Errorf("sink --config --verify: %q", out)
	}

	// A row changed behind the sink's back: --verify says so, exit 3.
	pg.Exec(t, "sinkcli", `UPDATE movements SET quantity = 31 WHERE movement_id = 'd1'`)
	pg.Exec(t, "sinkcli", `UPDATE movements SET seq = 9 WHERE movement_id = 'r1'`)
	stdout, stderr, code := runCLI(t, "sink", "--config", conf, "--verify", "--json")
	var v struct {
		Streams []struct {
			Different int `json:"different"`
		} `json:"streams"`
	}
	if json.Unmarshal([]byte(stdout), &v); code != cli.ExitAttention || len(v.Streams) != 1 || v.Streams[0].Different != 1 {
		t.Errorf("--verify after tampering: exit %d, want %d with one difference\n%s%s", code, cli.ExitAttention, stdout, stderr)
	}
	t.Setenv("RXEDGE_SINK_POSTGRES", "")

	// Nothing prints a password: a wrong one, one in the URL.
	bad := filepath.Join(dir, "bad.password")
	os.WriteFile(bad, []byte("wrong-Pa55word\n"), 0o600)
	for _, args := range [][]string{
		{"report", "balances", "--postgres", url, "--postgres-password-file", bad},
		{"report", "balances", "--postgres", pg.URL("sinkowner", "wrong-Pa55word", "sinkcli")},
		{"sink", "--verify", "--postgres", pg.URL("sinkowner", "wrong-Pa55word", "sinkcli"), "--server", srv.URL()},
		{"report", "balances", "--postgres", "postgres://sinkowner:wrong-Pa55word@127.0.0.1:1/x?connect_timeout=2"},
		{"report", "balances", "--postgres", "postgres://sinkowner:wrong-Pa55word@[bad"},
	} {
		stdout, stderr, code := runCLI(t, args...)
		if code == 0 || strings.Contains(stdout+stderr, "Pa55word") || strings.Contains(stdout+stderr, pw) {
			t.Errorf("hq %s: exit %d, output %q %q: want a failure that names no password", strings.Join(args[:3], " "), code, stdout, stderr)
		}
	}

	// Usage errors.
	for _, args := range [][]string{
		{"report", "inventory", "--postgres", url},
		{"report", "rx", "--postgres", url},
		{"report", "balances", "--json", "--csv", "--postgres", url},
		{"report", "everything", "--postgres", url},
		{"report", "balances"},
		{"sink", "--verify", "--migrate-only", "--postgres", url},
		{"sink", "--partitions", "65", "--postgres", url},
	} {
		if _, stderr, code := runCLI(t, args...); code != cli.ExitUsage {
			t.Errorf("hq %s: exit %d, want %d\n%s", strings.Join(args, " "), code, cli.ExitUsage, stderr)
		}
	}
}

// waitArchive polls RX_ARCHIVE until it holds n messages (awaited: the
// sourcing from RX_MOVEMENTS).
func waitArchive(t *testing.T, js jetstream.JetStream, n uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := js.Stream(ctx, central.ArchiveStreamName)
		cancel()
		if err == nil && st.CachedInfo().State.Msgs >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RX_ARCHIVE does not hold %d messages after 30 s (awaited: the sourcing; %v)", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSinkTakesPasswordsOnlyFromFiles: the sink's help offers no
// --password, as it says, and a --password given anyway is refused (exit
// 2) with where the password goes, without repeating it.
func TestSinkTakesPasswordsOnlyFromFiles(t *testing.T) {
	help, _, code := runCLI(t, "sink", "--help")
	if code != cli.ExitOK || strings.Contains(help, "--password ") || !strings.Contains(help, "--nats-password-file") {
		t.Errorf("sink --help (exit %d) offers --password, or not --nats-password-file:\n%s", code, help)
	}
	_, stderr, code := runCLI(t, "sink", "--postgres", "postgres://sink@127.0.0.1:1/rx", "--server", "nats://127.0.0.1:1", "--user", "audit", "--password", "Hunter2-sink")
	if code != cli.ExitUsage || !strings.Contains(stderr, "--nats-password-file") || strings.Contains(stderr, "Hunter2") {
		t.Errorf("sink --password: exit %d, %q; want exit 2 naming --nats-password-file, without the password", code, stderr)
	}
}

// TestSinkLogsJSON: the sink, a long-running command, logs JSON lines as
// the store's agent does: here its wait for a database that refuses
// connections, until it is stopped.
func TestSinkLogsJSON(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &lineSignal{line: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sink", "--postgres", "postgres://sink@127.0.0.1:1/rx", "--server", "nats://127.0.0.1:1"}, strings.NewReader(""), io.Discard, stderr)
	}()
	select {
	case <-stderr.line:
	case err := <-done:
		t.Fatalf("the sink ended before it logged: %v\n%s", err, stderr.text())
	case <-time.After(time.Minute):
		t.Fatalf("no log line within a minute of waiting for PostgreSQL")
	}
	cancel()
	<-done
	first := strings.SplitN(stderr.text(), "\n", 2)[0]
	var rec map[string]any
	if err := json.Unmarshal([]byte(first), &rec); err != nil || rec["level"] != "WARN" || rec["msg"] == nil {
		t.Errorf("the sink's log line %q is not a JSON record with a level and a message: %v", first, err)
	}
}

// lineSignal is a writer that closes line once a whole line was written.
type lineSignal struct {
	mu   stdsync.Mutex
	b    strings.Builder
	once stdsync.Once
	line chan struct{}
}

func (w *lineSignal) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if strings.Contains(w.b.String(), "\n") {
		w.once.Do(func() { close(w.line) })
	}
	return len(p), nil
}

func (w *lineSignal) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
