//go:build unix

// Tests that run the built agent as a child process and signal it, the way
// systemd stops the service.

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

// buildAgent builds the agent into a new temporary directory.
func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// child is one `agent run` process.
type child struct {
	cmd     *exec.Cmd
	ingest  string        // the ingest listener's address, from the STARTED line
	exited  chan struct{} // closed when the process has been waited for
	waitErr error         // set before exited is closed

	mu  stdsync.Mutex
	log bytes.Buffer // everything the agent wrote on stderr
}

func (c *child) logText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// startChild starts `agent run` with args and waits until it logs STARTED.
func startChild(t *testing.T, bin string, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(bin, append([]string{"run"}, args...)...), exited: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), "RXEDGE_SYNC_RESUME_JITTER=200ms")
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			c.mu.Lock()
			c.log.Write(sc.Bytes())
			c.log.WriteByte('\n')
			c.mu.Unlock()
			var line struct{ Msg, Ingest string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "STARTED" {
				started <- line.Ingest
			}
		}
		io.Copy(io.Discard, stderr)
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.exited
	})
	select {
	case c.ingest = <-started:
	case <-c.exited:
		t.Fatalf("agent exited before it started: %v\n%s", c.waitErr, c.logText())
	case <-time.After(20 * time.Second):
		t.Fatalf("agent did not log STARTED within 20 s:\n%s", c.logText())
	}
	return c
}

// wait waits up to d for the process to exit and returns how long it took.
func (c *child) wait(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-c.exited:
		return time.Since(start)
	case <-time.After(d):
		c.cmd.Process.Signal(syscall.SIGQUIT) // dump the goroutines into the log
		<-c.exited
		t.Fatalf("agent did not exit within %s:\n%s", d, c.logText())
	}
	return 0
}

// runStore is the store id of the agents these tests run.
const runStore = "S0107"

// agentConfig writes a config for store runStore with its data in dataDir.
func agentConfig(t *testing.T, dataDir string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, "store_id: %s\ndata_dir: %s\n", runStore, dataDir), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadGen submits movements from several concurrent clients to whichever
// agent currently listens at addr. A client resubmits a request until it is
// acknowledged (2xx) and only then makes new movements, so in the end every
// movement made was acknowledged, once or as a duplicate.
type loadGen struct {
	addr atomic.Pointer[string] // nil while no agent runs
	stop chan struct{}
	wg   stdsync.WaitGroup

	mu       stdsync.Mutex
	acked    map[string]string // key -> movement_id
	requests int
	refused  int // 503 while the agent drains
	failed   int // no answer: connection refused or reset
	errs     []string
}

func startLoad(clients int) *loadGen {
	l := &loadGen{stop: make(chan struct{}), acked: make(map[string]string)}
	for c := range clients {
		l.wg.Add(1)
		go l.client(c)
	}
	return l
}

// finish stops making new movements and waits until every client's last
// submission was acknowledged.
func (l *loadGen) finish() {
	close(l.stop)
	l.wg.Wait()
}

func (l *loadGen) ackedKeys() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]string, len(l.acked))
	for k, v := range l.acked {
		m[k] = v
	}
	return m
}

func (l *loadGen) client(c int) {
	defer l.wg.Done()
	hc := &http.Client{Timeout: 10 * time.Second}
	for n := 0; ; {
		select {
		case <-l.stop:
			return
		default:
		}
		var body bytes.Buffer
		ids := make([]string, 1+rand.IntN(4))
		for i := range ids {
			n++
			ids[i] = fmt.Sprintf("load-%d-%d", c, n)
			schedule := ""
			if n%5 == 0 {
				schedule = `,"schedule":"CII"`
			}
			fmt.Fprintf(&body, `{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2025-01-02T03:04:05Z"%s}`+"\n", ids[i], schedule)
		}
		if !l.submit(hc, body.Bytes(), ids) {
			return
		}
	}
}

// submit posts one request until it is acknowledged; false means an
// answer the test does not expect.
func (l *loadGen) submit(hc *http.Client, body []byte, ids []string) bool {
	for {
		addr := l.addr.Load()
		if addr == nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		resp, err := hc.Post("http://"+*addr+"/v1/movements", "application/x-ndjson", bytes.NewReader(body))
		if err != nil {
			l.count(&l.failed)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			l.count(&l.failed)
			continue
		case resp.StatusCode == http.StatusServiceUnavailable:
			l.count(&l.refused)
			time.Sleep(10 * time.Millisecond)
			continue
		case resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK:
			l.fail("%s: HTTP %d: %s", ids[0], resp.StatusCode, b)
			return false
		}
		var sub control.Submission
		if err := json.Unmarshal(b, &sub); err != nil || len(sub.Results) != len(ids) {
			l.fail("%s: answer %s: %v", ids[0], b, err)
			return false
		}
		l.mu.Lock()
		l.requests++
		for i, r := range sub.Results {
			if r.MovementID != ids[i] {
				l.errs = append(l.errs, fmt.Sprintf("result %d is %s, want %s", i, r.MovementID, ids[i]))
			}
			l.acked[r.Key] = r.MovementID
		}
		l.mu.Unlock()
		return true
	}
}

func (l *loadGen) count(n *int) {
	l.mu.Lock()
	*n++
	l.mu.Unlock()
}

func (l *loadGen) fail(format string, args ...any) {
	l.mu.Lock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// checkStored opens the stopped agent's data file read-only, checks that
// every key in acked is there, and returns its counts.
func checkStored(t *testing.T, dataDir string, acked map[string]string) queue.Stats {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dataDir), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	missing := 0
	for key, id := range acked {
		var k [16]byte
		if _, err := hex.Decode(k[:], []byte(key)); err != nil {
			t.Fatalf("key %q of %s: %v", key, id, err)
		}
		e, err := q.Get(k)
		if err != nil {
			if missing++; missing <= 10 {
				t.Errorf("acknowledged movement %s (key %s) is not in the data file: %v", id, key, err)
			}
			continue
		}
		if e.State != queue.Pending && e.State != queue.Synced {
			t.Errorf("movement %s (key %s) is %s, want pending or synced", id, key, e.State)
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged movements lost", missing, len(acked))
	}
	st, err := q.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// agentStatus runs `agent status --json` with the built binary.
func agentStatus(t *testing.T, bin, dataDir string) *status.Status {
	t.Helper()
	out, err := exec.Command(bin, "status", "--json", "--data-dir", dataDir, "--max-age", "0").Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == cli.ExitAttention) {
		t.Fatalf("agent status: %v\n%s", err, out)
	}
	var st status.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("agent status --json: %v\n%s", err, out)
	}
	return &st
}

// TestRunSIGTERMUnderLoad stops `agent run` with SIGTERM, several times, at
// random moments while clients submit movements over HTTP and the sender
// publishes to a real hub. Each time the agent must exit 0 within the stop
// deadline and keep every movement it acknowledged; after the last restart
// the backlog drains completely and central holds each movement exactly
// once.
func TestRunSIGTERMUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent for about half a minute")
	}
	bin := buildAgent(t)
	h := natstest.StartHub(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	cfg := agentConfig(t, dataDir)
	args := []string{"--config", cfg, "--nats", h.URL(), "--ingest", "127.0.0.1:0"}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, seed))

	load := startLoad(8)
	defer func() {
		// Let blocked clients give up if the test failed half-way.
		select {
		case <-load.stop:
		default:
			close(load.stop)
		}
	}()

	const rounds = 5
	for round := 1; round <= rounds; round++ {
		c := startChild(t, bin, args...)
		load.addr.Store(&c.ingest)
		time.Sleep(time.Duration(rnd.Int64N(int64(1500 * time.Millisecond))))
		before := len(load.ackedKeys())

		if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		took := c.wait(t, 15*time.Second)
		load.addr.Store(nil)
		if c.waitErr != nil || took > 10*time.Second {
			t.Fatalf("round %d: after SIGTERM the agent exited with %v after %s; want exit 0 within 10 s:\n%s", round, c.waitErr, took, c.logText())
		}
		if !strings.Contains(c.logText(), `"msg":"STOPPED"`) {
			t.Errorf("round %d: no STOPPED line in the log:\n%s", round, c.logText())
		}
		acked := load.ackedKeys()
		qs := checkStored(t, dataDir, acked)
		t.Logf("round %d: stopped %s after SIGTERM; %d movements acknowledged (%d before the signal); file: %d pending, %d synced",
			round, took.Round(time.Millisecond), len(acked), before, qs.Count(queue.Pending), qs.Count(queue.Synced))
	}

	// The last run: the clients finish what they submitted, then the
	// backlog drains to the hub.
	c := startChild(t, bin, args...)
	load.addr.Store(&c.ingest)
	time.Sleep(300 * time.Millisecond)
	load.finish()
	acked := load.ackedKeys()
	if len(load.errs) > 0 {
		t.Fatalf("unexpected answers to the clients:\n%s", strings.Join(load.errs, "\n"))
	}
	t.Logf("%d requests acknowledged, %d refused while stopping, %d without an answer; %d movements",
		load.requests, load.refused, load.failed, len(acked))
	if len(acked) < 100 {
		t.Fatalf("only %d movements acknowledged: the load did not run", len(acked))
	}

	var st *status.Status
	deadline := time.Now().Add(60 * time.Second)
	for {
		st = agentStatus(t, bin, dataDir)
		if st.Counts.Pending.Total == 0 && st.Leased == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog not drained within 60 s: %d pending, %d in flight, connection %+v", st.Counts.Pending.Total, st.Leased, st.Connection)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got, want := st.Counts.Synced.Total, uint64(len(acked)); got != want || st.Counts.Quarantined.Total != 0 {
		t.Errorf("status after the drain: %d synced, %d quarantined; want %d synced, 0 quarantined", got, st.Counts.Quarantined.Total, want)
	}
	// Not the installed service's data directory: no service line.
	if !st.Agent.Running || st.Service != nil {
		t.Errorf("status: agent running %v, service %+v; want running and no service", st.Agent.Running, st.Service)
	}

	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if took := c.wait(t, 15*time.Second); c.waitErr != nil || took > 10*time.Second {
		t.Fatalf("last SIGTERM: exited with %v after %s:\n%s", c.waitErr, took, c.logText())
	}
	checkStored(t, dataDir, acked)

	// Central holds exactly one message per acknowledged movement, under
	// the subjects of exactly those keys, besides the store's checkpoints.
	js := natstest.JetStream(t, natstest.Connect(t, h.URL()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(central.Subject(runStore, ">")))
	if err != nil {
		t.Fatal(err)
	}
	cps := 0
	for subj := range info.State.Subjects {
		if ledger.IsCheckpointToken(subj[strings.LastIndexByte(subj, '.')+1:]) {
			cps++
		}
	}
	if want := uint64(len(acked) + cps); info.State.Msgs != want || info.State.NumSubjects != want {
		t.Errorf("central holds %d messages on %d subjects; want %d on %d (%d checkpoints)", info.State.Msgs, info.State.NumSubjects, want, want, cps)
	}
	for key, id := range acked {
		if n := info.State.Subjects[central.Subject(runStore, key)]; n != 1 {
			t.Errorf("central holds movement %s (key %s) %d times, want once", id, key, n)
		}
	}
	if len(info.State.Subjects) != len(acked)+cps {
		t.Errorf("central lists %d subjects, want %d and %d checkpoints", len(info.State.Subjects), len(acked), cps)
	}
}

// TestRunSecondSignalKills: a second SIGTERM (or Ctrl-C) ends a stopping
// agent at once, and what it acknowledged is kept.
func TestRunSecondSignalKills(t *testing.T) {
	bin := buildAgent(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	cfg := agentConfig(t, dataDir)
	c := startChild(t, bin, "--config", cfg, "--ingest", "127.0.0.1:0")

	body := `{"movement_id":"POS-1","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2025-01-02T03:04:05Z"}`
	resp, err := http.Post("http://"+c.ingest+"/v1/movements", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var sub control.Submission
	json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || len(sub.Results) != 1 {
		t.Fatalf("submit: HTTP %d %+v", resp.StatusCode, sub)
	}

	// A request whose body never finishes holds the graceful stop (it
	// waits for requests in flight) for seconds.
	conn, err := net.Dial("tcp", c.ingest)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/movements HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body)+10, body[:10])
	time.Sleep(200 * time.Millisecond) // let the server read the headers

	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	select {
	case <-c.exited:
		t.Fatalf("the agent stopped before the second signal (%v); the test needs a stop that takes longer:\n%s", c.waitErr, c.logText())
	default:
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	took := c.wait(t, 5*time.Second)
	var ee *exec.ExitError
	if !errors.As(c.waitErr, &ee) {
		t.Fatalf("after the second SIGTERM: %v, want the process killed by it:\n%s", c.waitErr, c.logText())
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM || took > 2*time.Second {
		t.Fatalf("after the second SIGTERM: %v after %s, want killed by SIGTERM at once:\n%s", c.waitErr, took, c.logText())
	}
	checkStored(t, dataDir, map[string]string{sub.Results[0].Key: "POS-1"})
}

// TestServiceControlNeedsAdmin runs the commands that change the service as
// an ordinary user: they refuse, naming what is needed, and change nothing.
// As root the test runs them as the user nobody; it never runs them as
// root, which would act on a real installation.
func TestServiceControlNeedsAdmin(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the service commands run on linux and windows; this test drops privileges the unix way")
	}
	bin := buildAgent(t)
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534} // nobody
		for _, dir := range []string{filepath.Dir(bin), filepath.Dir(filepath.Dir(bin))} {
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, args := range [][]string{{"start"}, {"stop"}, {"restart"}, {"uninstall"}} {
		t.Run(args[0], func(t *testing.T) {
			cmd := exec.Command(bin, args...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitError {
				t.Fatalf("agent %s: %v, want exit %d\n%s", args[0], err, cli.ExitError, out)
			}
			if !strings.Contains(string(out), "administrator rights") || !strings.Contains(string(out), "sudo") {
				t.Errorf("agent %s does not say it needs root:\n%s", args[0], out)
			}
		})
	}
}
