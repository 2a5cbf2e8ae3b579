//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// hqRig is central run with a generated production configuration, three
// stores' agents (the built binary), a real PostgreSQL and the keys and
// settings of hq run.
type hqRig struct {
	hq, config, metrics string
	url                 string
	ingest, data        map[string]string
	pg                  *pgtest.Server
	db                  string
	admin               jetstream.JetStream
}

var rigStores = []string{"S0001", "S0002", "S0003"}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// newHQRig starts central, the stores (each acknowledges 5 movements and
// publishes a checkpoint of them) and PostgreSQL, and writes hq.yaml.
func newHQRig(t *testing.T) *hqRig {
	t.Helper()
	dir := t.TempDir()
	var conf bytes.Buffer
	if err := provision.CentralConfig(&conf, rigStores, 1); err != nil {
		t.Fatal(err)
	}
	// The insider is central's administrator, who can edit the servers'
	// configuration: a user of the central account without limits.
	const users = "  RX {\n    jetstream: enabled\n    users: [\n"
	if !strings.Contains(conf.String(), users) {
		t.Fatalf("the generated configuration has no RX account's users to add the insider to")
	}
	text := strings.Replace(conf.String(), users, users+"      { user: insider, password: \"insider-pw\" }\n", 1)
	h := natstest.StartHub(t, natstest.WithConfigFile(writeFile(t, filepath.Join(dir, "central.conf"), text),
		nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")))
	r := &hqRig{hq: agentbin.BuildHQ(t), url: h.URL(), ingest: map[string]string{}, data: map[string]string{}}
	r.admin = natstest.JetStream(t, natstest.Connect(t, h.URL(), nats.UserInfo("insider", "insider-pw")))
	seed, pub := ledgertest.Operator(t)
	agent := agentbin.Build(t)
	var roster strings.Builder
	for _, s := range rigStores {
		r.data[s], r.ingest[s] = runStoreAs(t, agent, h.URL(), s, pub)
		r.submit(t, s, 0, 5)
	}
	for _, s := range rigStores {
		st := waitLedger(t, r.data[s], 5)
		fmt.Fprintf(&roster, "%s %s\n", s, st.Ledger.PublicKey)
	}
	r.pg = pgtest.Start(t)
	r.pg.Exec(t, "postgres", `CREATE ROLE hqsink LOGIN PASSWORD 'hq-sink-pw'`)
	r.pg.Exec(t, "postgres", `CREATE DATABASE hq OWNER hqsink`)
	r.db = r.pg.URL("hqsink", "hq-sink-pw", "hq")
	skey, vkey, err := audit.GenerateWitnessKey(rand.Reader, "")
	if err != nil {
		t.Fatal(err)
	}
	pw := func(name, v string) string { return writeFile(t, filepath.Join(dir, name), v+"\n") }
	r.metrics = agentbin.FreeAddr(t)
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	r.config = writeFile(t, filepath.Join(dir, "hq.yaml"), fmt.Sprintf(`listen: %s
state_dir: %s
roster: %s
postgres:
  url: %s
  password: {file: %s}
nats:
  servers: %s
  partitions: 1
  audit: {user: audit, password: {file: %s}, js_api_prefix: rx.audit.api.}
  witness: {user: witness, password: {file: %s}, js_api_prefix: rx.witness-api.}
  ops: {user: ops, password: {file: %s}}
  operator_key: {file: %s}
sink: {flush_interval: 50ms}
witness: {signing_key: {file: %s}, public_key: %s, interval: 500ms}
verify: {interval: 2s}
reconcile: {interval: 5s}
fleet: {interval: 500ms}
`, r.metrics, state, writeFile(t, filepath.Join(dir, "roster"), roster.String()), r.pg.URL("hqsink", "", "hq"), pw("pg", "hq-sink-pw"),
		h.URL(), pw("audit", "CHANGE-ME-audit"), pw("witness", "CHANGE-ME-witness"), pw("ops", "CHANGE-ME-ops"),
		writeFile(t, filepath.Join(dir, "operator.nk"), string(seed)), pw("witness.key", skey), vkey))
	return r
}

// submit posts movements n0..n1-1 to store's agent.
func (r *hqRig) submit(t *testing.T, store string, n0, n1 int) {
	t.Helper()
	var body strings.Builder
	body.WriteString("[")
	for i := n0; i < n1; i++ {
		if i > n0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"movement_id":"%s-%d","type":"dispense","ndc":"12345-6789-01","quantity":%d,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, store, i, i+1)
	}
	body.WriteString("]")
	resp, err := http.Post("http://"+r.ingest[store]+control.IngestPath, "application/json", strings.NewReader(body.String()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submission to %s: %d", store, resp.StatusCode)
	}
}

// hqProc is a running hq run.
type hqProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
}

// start runs hq run --config as a child process, killed when the test
// ends; env is added to its environment.
func (r *hqRig) start(t *testing.T, env ...string) *hqProc {
	t.Helper()
	return r.startWith(t, r.config, env...)
}

// startWith runs hq run with the settings file config.
func (r *hqRig) startWith(t *testing.T, config string, env ...string) *hqProc {
	t.Helper()
	p := &hqProc{cmd: exec.Command(r.hq, "run", "--config", config), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.Write(append(sc.Bytes(), '\n'))
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
		p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			p.mu.Lock()
			t.Logf("hq run's log:\n%s", p.logs.String())
			p.mu.Unlock()
		}
	})
	return p
}

// kill kills the process with SIGKILL and waits for it to end.
func (p *hqProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 hq run: %v", err)
	}
	<-p.done
}

// logged says whether hq run's log holds s.
func (p *hqProc) logged(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Contains(p.logs.String(), s)
}

// scrape reads hq run's /metrics: each series (name and labels as the
// text shows them) and its value.
func scrape(addr string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// passes are the passes a job completed, by hq run's /metrics.
func passes(m map[string]float64, job string) float64 {
	return m[`rxedge_hq_job_runs_total{job="`+job+`",result="ok"}`] + m[`rxedge_hq_job_runs_total{job="`+job+`",result="attention"}`]
}

// eventually polls cond against the real servers until it holds, for at
// most two minutes (a busy CI machine runs three agents, central,
// PostgreSQL and hq here).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 2 minutes: %s", what)
		}
		time.Sleep(100 * time.Millisecond) // polled: the state of real servers
	}
}

func (r *hqRig) count(t *testing.T, sql string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, r.db)
	if err != nil {
		return -1
	}
	defer c.Close(ctx)
	var n int64
	if err := c.QueryRow(ctx, sql).Scan(&n); err != nil {
		return -1
	}
	return n
}

func (r *hqRig) witnessed(t *testing.T) uint64 {
	t.Helper()
	st, err := r.admin.Stream(context.Background(), central.WitnessStreamName)
	if err != nil {
		return 0
	}
	return st.CachedInfo().State.Msgs
}

// TestServiceFindsAnInsiderRewrite runs hq run alone against central
// (the generated production configuration), three stores' agents and
// PostgreSQL: it brings the archive into PostgreSQL, countersigns the
// checkpoints and verifies incrementally. Then central's administrator
// rewrites the archive (the streams deleted and recreated, a movement
// dropped, one altered with its digest recomputed, two trading
// sequences): the rewrite is a finding, in verify_findings and on
// /metrics, by the second verification pass after it, and the sink, the
// witness and the fleet watch make progress after it.
func TestServiceFindsAnInsiderRewrite(t *testing.T) {
	r := newHQRig(t)
	r.start(t)
	eventually(t, "the sink writes the 15 movements, the witness countersigns, verification completes a pass", func() bool {
		m := scrape(r.metrics)
		return r.count(t, `SELECT count(*) FROM movements`) == 15 && r.witnessed(t) >= 3 && passes(m, "verify") >= 1 && passes(m, "fleet") >= 1
	})
	if n := r.count(t, `SELECT count(*) FROM verify_findings WHERE closed_at IS NULL`); n != 0 {
		t.Fatalf("%d open findings before the rewrite", n)
	}
	before := scrape(r.metrics)
	if before[`rxedge_hq_verify_last_pass_incremental`] != 1 && passes(before, "verify") > 1 {
		t.Errorf("the second verification pass did not start from the saved state")
	}

	ctx := context.Background()
	ledgertest.RewriteArchive(ctx, t, r.admin, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		var out []ledgertest.Record
		var s3 []int
		for _, rec := range recs {
			store := rec.Header.Get(central.HeaderStore)
			switch {
			case rec.Token() != "":
			case store == "S0001" && rec.Seq() == 2:
				continue // dropped
			case store == "S0002" && rec.Seq() == 3:
				rec.SetPayload(bytes.Replace(rec.Data, []byte(`"quantity":"3"`), []byte(`"quantity":"30"`), 1))
			case store == "S0003" && (rec.Seq() == 1 || rec.Seq() == 2):
				s3 = append(s3, len(out))
			}
			out = append(out, rec)
		}
		if len(s3) == 2 {
			out[s3[0]].SetSeq(2)
			out[s3[1]].SetSeq(1)
		}
		return out
	})
	at := passes(scrape(r.metrics), "verify")
	// The pass commits its findings, then sets its gauges: /metrics is
	// read once the table holds the finding.
	var found map[string]float64
	eventually(t, "a finding of the rewrite in verify_findings, then a rxedge_hq_verify_findings_open series on /metrics", func() bool {
		if r.count(t, `SELECT count(*) FROM verify_findings WHERE closed_at IS NULL`) <= 0 {
			return false
		}
		found = scrape(r.metrics)
		for k, v := range found {
			if strings.HasPrefix(k, "rxedge_hq_verify_findings_open{") && v > 0 {
				return true
			}
		}
		return false
	})
	if n := passes(found, "verify") - at; n > 2 {
		t.Errorf("the rewrite was found %v verification passes after it, want at most 2", n)
	}
	rows, wit := r.count(t, `SELECT count(*) FROM movements`), r.witnessed(t)
	r.submit(t, "S0001", 5, 9)
	eventually(t, "the sink, the witness and the fleet watch go on after the finding", func() bool {
		m := scrape(r.metrics)
		return r.count(t, `SELECT count(*) FROM movements`) > rows && r.witnessed(t) > wit && passes(m, "fleet") > passes(found, "fleet")
	})
	for _, kind := range []string{audit.KindArchiveRewritten} {
		if n := r.count(t, `SELECT count(*) FROM verify_findings WHERE closed_at IS NULL AND kind = '`+kind+`'`); n < 1 {
			t.Errorf("no open %s finding after the rewrite", kind)
		}
	}
}
