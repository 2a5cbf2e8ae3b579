package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/faultproxy"
	"github.com/rxedge/agent/testkit/natstest"
)

const (
	storeID = "SOAK01"
	// hubMaxPayload is small enough that a movement with a long note
	// (bigMovement) can never be stored: it is quarantined as too large.
	hubMaxPayload = 2048
	// drainBudget bounds the wait for the backlog after the faults end. A
	// sender paused by a fault probes with a backoff of up to five minutes.
	drainBudget = 6 * time.Minute
)

func TestMain(m *testing.M) {
	code := m.Run()
	agentbin.Cleanup()
	os.Exit(code)
}

// agentEnv makes the agent react quickly: short retry delays and resume
// jitter, and a dead connection noticed within seconds.
var agentEnv = []string{
	"RXEDGE_SYNC_RESUME_JITTER=200ms",
	"RXEDGE_SYNC_ATTEMPT_TIMEOUT=2s",
	"RXEDGE_NATS_PING_INTERVAL=1s",
	"RXEDGE_RETRY_ORDINARY_BASE_DELAY=50ms",
	"RXEDGE_RETRY_ORDINARY_MAX_DELAY=1s",
	"RXEDGE_RETRY_CONTROLLED_BASE_DELAY=50ms",
	"RXEDGE_RETRY_CONTROLLED_MAX_DELAY=1s",
}

// The faults the loop chooses from.
const (
	faultKill      = "kill agent"
	faultHub       = "restart hub"
	faultCut       = "cut network"
	faultBlackhole = "black hole"
	faultDiskFull  = "disk full"
	faultRedrive   = "redrive"
)

var faults = []string{faultKill, faultHub, faultCut, faultBlackhole, faultDiskFull, faultRedrive}

func TestSoak(t *testing.T) {
	spec := os.Getenv("RXEDGE_SOAK")
	if spec == "" {
		t.Skip("the soak test is off by default; run it with a duration: RXEDGE_SOAK=2m go test ./testkit/soak/ -run Soak -v (for 30m add -timeout 45m)")
	}
	if runtime.GOOS == "windows" {
		t.Skip("the soak test kills processes with SIGKILL and limits file sizes with prlimit: Linux only")
	}
	soakFor, err := time.ParseDuration(spec)
	if err != nil || soakFor <= 0 {
		t.Fatalf("RXEDGE_SOAK=%q: want a duration such as 2m or 30m", spec)
	}
	if dl, ok := t.Deadline(); ok && time.Until(dl) < soakFor+drainBudget+time.Minute {
		t.Fatalf("RXEDGE_SOAK=%s needs more time than go test's -timeout leaves (%s): pass -timeout %s",
			soakFor, time.Until(dl).Round(time.Second), (soakFor + drainBudget + 5*time.Minute).Round(time.Minute))
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RXEDGE_SOAK_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("RXEDGE_SOAK_SEED=%q: want a number", s)
		}
	}
	t.Logf("soak for %s, seed %d (RXEDGE_SOAK_SEED=%d repeats the random choices)", soakFor, seed, seed)
	rnd := rand.New(rand.NewPCG(seed, 1))

	r := newRig(t)
	if err := r.start(0); err != nil {
		t.Fatal(err)
	}
	sub := newSubmitter(r.ingest, seed)
	ctx, stopSubmitting := context.WithCancel(context.Background())
	go sub.run(ctx)
	defer func() {
		stopSubmitting()
		<-sub.done
	}()

	// The fault loop: a random fault every few seconds, each healed before
	// the next.
	began := time.Now()
	counts := map[string]int{}
	for n := 1; time.Since(began) < soakFor; n++ {
		r.sleep(rnd, 1*time.Second, 5*time.Second)
		f := faults[rnd.IntN(len(faults))]
		detail := r.inject(f, rnd)
		counts[f]++
		t.Logf("%7s fault %3d: %-11s %s", time.Since(began).Round(time.Second), n, f, detail)
	}
	stopSubmitting()
	<-sub.done

	// Heal everything and let the agent drain its backlog, in an agent
	// started afresh: a request whose answer the submitter gave up on can
	// still be inside the running agent and be acknowledged after the
	// drain looked. A stopped agent holds none (a clean stop waits for
	// the requests it is answering; a killed one answers none).
	r.proxy.Pass()
	if r.hub.Hub() == nil {
		r.hub.Start(t)
	}
	if r.agent != nil && !r.agent.isDone() && !r.agent.limited {
		r.stop()
	}
	r.kill()
	if err := r.start(0); err != nil {
		t.Fatal(err)
	}
	st := r.drain()
	r.stop()

	// The checks.
	central := r.centralSubjects()
	quarantined := r.quarantine()
	q, err := queue.Open(queue.Options{Path: settings.DataFile(r.dir), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Verify(); err != nil {
		t.Errorf("the data file fails its invariant check: %v", err)
	}
	qs, err := q.Stats()
	if err != nil {
		t.Fatal(err)
	}

	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
		if len(problems) == 20 {
			problems = append(problems, "…")
		}
	}
	for _, a := range sub.anomalies {
		problem("submitter: %s", a)
	}
	acked := maps.Clone(sub.acked)
	maps.Copy(acked, r.filled)
	var ackedStored, ackedQuarantined int
	reasons := map[string]int{}
	for key, m := range acked {
		n := central[key]
		reason, inQuarantine := quarantined[key]
		e, err := q.Get(m.key16)
		switch {
		case err != nil:
			problem("acknowledged movement %s (%s) is not in the data file: %v", m.id, key, err)
		case n == 1 && !inQuarantine && e.State == queue.Synced:
			ackedStored++
		case n == 0 && inQuarantine && reason != "" && e.State == queue.Quarantined:
			ackedQuarantined++
			reasons[reason]++
		default:
			problem("acknowledged movement %s (%s): %d time(s) in central, quarantined %v (reason %q), local state %v", m.id, key, n, inQuarantine, reason, e.State)
		}
		if m.big && !inQuarantine {
			problem("movement %s is larger than central's max_payload but not quarantined", m.id)
		}
	}
	total := 0
	for key, n := range central {
		total += n
		if n != 1 {
			problem("subject of %s holds %d messages", key, n)
		}
		if e, err := q.Get(keyBytes(key)); err != nil || e.State != queue.Synced {
			problem("%s is stored in central, but locally it is %v (%v)", key, e.State, err)
		}
	}
	if uint64(len(central)) != qs.Count(queue.Synced) {
		problem("central holds %d movements of the store, the data file %d synced keys", len(central), qs.Count(queue.Synced))
	}
	if qs.Count(queue.Pending) != 0 {
		problem("%d movements still pending after the drain", qs.Count(queue.Pending))
	}
	if _, err := os.Stat(settings.DataFile(r.dir) + queue.CompactSuffix); !errors.Is(err, os.ErrNotExist) {
		problem("a compaction's leftover %s%s is still there (%v)", settings.DataFile(r.dir), queue.CompactSuffix, err)
	}

	pl := "prlimit: " + r.prlimit
	if r.prlimit == "" {
		pl = "no prlimit: disk-full faults skipped"
	}
	var fs []string
	for _, f := range faults {
		fs = append(fs, fmt.Sprintf("%s %d", f, counts[f]))
	}
	var rs []string
	for reason, n := range reasons {
		rs = append(rs, fmt.Sprintf("%s %d", reason, n))
	}
	sort.Strings(rs)
	t.Logf(`soak summary (seed %d, %s of faults, %s in all; %s):
  requests %d: %d acknowledged (%d answered all-duplicate), %d refused 507 (disk full), %d refused 503, other codes %v, %d failed to connect or lost the answer
  movements: %d submitted (%d big), %d acknowledged, %d more acknowledged in disk-full bursts; %d stored centrally, %d quarantined (%s); central holds %d messages on %d subjects for the store (%d stored but never acknowledged)
  faults: %s; agent runs %d, redrives answered %d
  agent at the end: %d synced, %d quarantined, %d pending, data file %d bytes; the drain took %s; compactions at start-up %d; agent logs with a panic: %d`,
		seed, soakFor, time.Since(began).Round(time.Second), pl,
		sub.stats.requests, sub.stats.acked, sub.stats.allDuplicate, sub.stats.diskFull, sub.stats.unavailable, sub.stats.otherCodes, sub.stats.failed,
		len(sub.tried), sub.stats.big, len(sub.acked), len(r.filled), ackedStored, ackedQuarantined, strings.Join(rs, ", "), total, len(central), len(central)-ackedStored,
		strings.Join(fs, ", "), r.runs, r.redrives,
		st.Counts.Synced.Total, st.Counts.Quarantined.Total, st.Counts.Pending.Total, st.DataFile.SizeBytes, r.drained.Round(time.Second), r.logCount(`"msg":"COMPACTED"`), r.panics())
	if len(acked) == 0 || ackedStored == 0 {
		problem("nothing was acknowledged and stored: the soak did not exercise the agent")
	}
	if r.panics() > 0 {
		problem("%d agent runs logged a panic; see the logs in %s", r.panics(), r.logDir)
	}
	if len(problems) > 0 {
		t.Errorf("%d problem(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
		r.dumpLastLog()
	}
}

func keyBytes(hexKey string) [16]byte {
	k, _ := movement.ParseKey(hexKey)
	return k
}

// rig is the system under test: the agent binary, the hub and the proxy
// between them. Its methods run on the test's goroutine.
type rig struct {
	t        *testing.T
	bin      string
	dir      string // the agent's data directory
	cfg      string // an empty configuration file
	ingest   string // the agent's ingest address, the same across runs
	logDir   string
	hub      *natstest.Server
	proxy    *faultproxy.Proxy
	agent    *agentRun
	runs     int
	prlimit  string
	filled   map[string]*submission // acknowledged by the disk-full bursts
	fillNext int
	redrives int
	drained  time.Duration
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, bin: agentbin.Build(t), logDir: t.TempDir(), filled: map[string]*submission{}}
	base := t.TempDir()
	r.dir = filepath.Join(base, "data")
	if n := len(control.Endpoint(r.dir)); n >= 104 {
		t.Skipf("the control socket's path in the temporary directory is %d bytes, over the limit of unix socket addresses", n)
	}
	r.cfg = filepath.Join(base, "agent.yaml")
	if err := os.WriteFile(r.cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r.ingest = agentbin.FreeAddr(t)
	r.hub = natstest.StartHub(t, natstest.WithMaxPayload(hubMaxPayload))
	p, err := faultproxy.New(r.hub.Addr())
	if err != nil {
		t.Fatal(err)
	}
	r.proxy = p
	t.Cleanup(func() { p.Close() })
	t.Cleanup(r.kill)
	if path, err := exec.LookPath("prlimit"); err == nil {
		r.prlimit = path
	} else {
		t.Logf("prlimit (util-linux) not found: the disk-full fault is skipped")
	}
	return r
}

// agentRun is one run of the agent binary.
type agentRun struct {
	n       int
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	logPath string
	limited bool // started under a file-size limit not yet lifted
}

func (a *agentRun) isDone() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// pipeOnly hides the *os.File behind an io.Writer, so that exec copies the
// agent's output through a pipe: the log file is then written by this
// process, out of reach of the agent's file-size limit.
type pipeOnly struct{ w io.Writer }

func (p pipeOnly) Write(b []byte) (int, error) { return p.w.Write(b) }

// start runs the agent, under a file-size limit of limit bytes when limit
// is positive, and waits until it is ready.
func (r *rig) start(limit int64) error {
	r.runs++
	a := &agentRun{n: r.runs, done: make(chan struct{}), limited: limit > 0}
	a.logPath = filepath.Join(r.logDir, fmt.Sprintf("agent-%03d.log", a.n))
	logf, err := os.Create(a.logPath)
	if err != nil {
		return err
	}
	args := []string{r.bin, "run", "--config", r.cfg, "--store-id", storeID, "--data-dir", r.dir,
		"--ingest", r.ingest, "--nats", r.proxy.URL(), "--log-level", "info"}
	if limit > 0 {
		args = append([]string{r.prlimit, fmt.Sprintf("--fsize=%d:unlimited", limit), "--"}, args...)
	}
	a.cmd = exec.Command(args[0], args[1:]...)
	a.cmd.Env = append(os.Environ(), agentEnv...)
	a.cmd.Stdout = pipeOnly{logf}
	a.cmd.Stderr = pipeOnly{logf}
	if err := a.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	r.agent = a
	go func() {
		a.err = a.cmd.Wait()
		logf.Close()
		close(a.done)
	}()
	deadline := time.Now().Add(time.Minute)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get("http://" + r.ingest + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-a.done:
			return fmt.Errorf("agent run %d exited before it was ready (%v):\n%s", a.n, a.err, tail(a.logPath, 20))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.kill()
			return fmt.Errorf("agent run %d not ready after a minute:\n%s", a.n, tail(a.logPath, 20))
		}
	}
}

// kill ends the agent with SIGKILL, if it runs.
func (r *rig) kill() {
	if r.agent == nil {
		return
	}
	r.agent.cmd.Process.Signal(syscall.SIGKILL)
	<-r.agent.done
}

// stop ends the agent cleanly with SIGTERM.
func (r *rig) stop() {
	r.t.Helper()
	a := r.agent
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
		if a.err != nil {
			r.t.Errorf("agent run %d ended with %v after SIGTERM:\n%s", a.n, a.err, tail(a.logPath, 20))
		}
	case <-time.After(30 * time.Second):
		r.kill()
		r.t.Errorf("agent run %d did not stop within 30s of SIGTERM", a.n)
	}
}

// restart kills the agent and starts it again without limits; start-up
// failures are retried, since a fault may have left it briefly unable to
// start.
func (r *rig) restart() {
	r.t.Helper()
	r.kill()
	var err error
	for range 3 {
		if err = r.start(0); err == nil {
			return
		}
		r.t.Logf("restart: %v", err)
		time.Sleep(time.Second)
	}
	r.t.Fatalf("the agent does not start any more: %v", err)
}

func (r *rig) sleep(rnd *rand.Rand, lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(rnd.Int64N(int64(hi-lo))))
}

// inject causes fault f, waits a while, heals it and says what it did.
func (r *rig) inject(f string, rnd *rand.Rand) string {
	t := r.t
	if r.agent.isDone() {
		t.Logf("the agent had exited (%v); starting it again:\n%s", r.agent.err, tail(r.agent.logPath, 10))
		r.restart()
	}
	switch f {
	case faultKill:
		r.kill()
		r.sleep(rnd, 0, time.Second)
		r.restart()
		return fmt.Sprintf("SIGKILL, restarted as run %d", r.runs)
	case faultHub:
		r.hub.Stop()
		down := time.Duration(rnd.Int64N(int64(4 * time.Second)))
		time.Sleep(down)
		r.hub.Start(t)
		return fmt.Sprintf("down for %s", down.Round(time.Millisecond))
	case faultCut:
		st := r.proxy.Stats()
		r.proxy.Cut()
		return fmt.Sprintf("%d connection(s) cut", st.Active)
	case faultBlackhole:
		r.proxy.Blackhole()
		d := time.Second + time.Duration(rnd.Int64N(int64(6*time.Second)))
		time.Sleep(d)
		r.proxy.Pass()
		return fmt.Sprintf("for %s", d.Round(time.Millisecond))
	case faultDiskFull:
		if r.prlimit == "" {
			return "skipped: prlimit (util-linux) is not installed"
		}
		// The limit is where the file's data ends, give or take a few
		// pages: commits that need new pages fail as on a full disk (the
		// agent ignores SIGXFSZ and gets EFBIG). The store is offline
		// meanwhile, so nothing drains, and a burst of submissions uses up
		// the free pages inside the file until the agent refuses.
		r.kill()
		limit := r.dataEnd() + rnd.Int64N(256<<10)
		r.proxy.Blackhole()
		defer r.proxy.Pass()
		if err := r.start(limit); err != nil {
			// The start-up itself may need to grow the file.
			t.Logf("disk full: the agent could not start under a limit of %d bytes: %v", limit, err)
			r.restart()
			return fmt.Sprintf("limit %d bytes: the agent refused to start; restarted without the limit", limit)
		}
		acked, refusedAt := r.fill(10 * time.Second)
		d := time.Second + time.Duration(rnd.Int64N(int64(3*time.Second)))
		time.Sleep(d)
		refused := bytes.Count(readFile(r.agent.logPath), []byte(`"code":507`))
		if r.agent.isDone() {
			t.Logf("disk full: agent run %d exited under the limit: %v\n%s", r.agent.n, r.agent.err, tail(r.agent.logPath, 10))
			r.restart()
			return fmt.Sprintf("limit %d bytes: the agent exited; restarted without the limit", limit)
		}
		out, err := exec.Command(r.prlimit, "--pid", fmt.Sprint(r.agent.cmd.Process.Pid), "--fsize=unlimited:unlimited").CombinedOutput()
		if err != nil {
			t.Logf("disk full: lifting the limit failed (%v: %s); restarting the agent", err, out)
			r.restart()
			return fmt.Sprintf("limit %d bytes; restarted to lift it", limit)
		}
		r.agent.limited = false
		burst := fmt.Sprintf("a burst of %d movements acknowledged, then refused 507 after %s", acked, refusedAt.Round(time.Millisecond))
		if refusedAt == 0 {
			burst = fmt.Sprintf("a burst of %d movements acknowledged, never refused", acked)
		}
		return fmt.Sprintf("file-size limit %d bytes, offline: %s; lifted %s later; %d request(s) refused 507 in all", limit, burst, d.Round(time.Millisecond), refused)
	case faultRedrive:
		out, err := exec.Command(r.bin, "dlq", "redrive", "--all", "--reason-text", "soak", "--data-dir", r.dir).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("agent dlq redrive: %v: %s", err, bytes.TrimSpace(out))
		}
		r.redrives++
		return string(bytes.TrimSpace(firstLine(out)))
	}
	t.Fatalf("unknown fault %q", f)
	return ""
}

// fill submits batches of movements with long notes (small enough for
// central) until the agent refuses one with 507 or for at most d, and
// records those acknowledged in r.filled. It returns how many were
// acknowledged and when the first refusal came (0 for none).
func (r *rig) fill(d time.Duration) (acked int, refusedAt time.Duration) {
	start := time.Now()
	client := &http.Client{Timeout: 15 * time.Second}
	note := strings.Repeat("f", 900)
	for time.Since(start) < d {
		var body bytes.Buffer
		batch := make([]*submission, 200)
		for i := range batch {
			r.fillNext++
			id := fmt.Sprintf("fill-%07d", r.fillNext)
			js := fmt.Sprintf(`{"movement_id":%q,"type":"receive","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":%q,"note":%q}`,
				id, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339), note)
			key := movement.KeyString(storeID, id)
			batch[i] = &submission{id: id, key: key, key16: keyBytes(key), body: []byte(js)}
			body.WriteString(js)
			body.WriteByte('\n')
		}
		resp, err := client.Post("http://"+r.ingest+"/v1/movements", "application/x-ndjson", &body)
		if err != nil {
			return acked, 0
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusAccepted:
			var sub control.Submission
			if err := json.Unmarshal(b, &sub); err != nil || len(sub.Results) != len(batch) {
				r.t.Errorf("fill: HTTP 202 with an unexpected answer: %s", b)
				return acked, 0
			}
			for _, m := range batch {
				r.filled[m.key] = m
			}
			acked += len(batch)
		case http.StatusInsufficientStorage:
			return acked, time.Since(start)
		default:
			r.t.Errorf("fill: HTTP %d: %s", resp.StatusCode, b)
			return acked, 0
		}
	}
	return acked, 0
}

// dataEnd is the end of the last page in use in the data file (the agent
// is stopped).
func (r *rig) dataEnd() int64 {
	r.t.Helper()
	q, err := queue.Open(queue.Options{Path: settings.DataFile(r.dir), ReadOnly: true})
	if err != nil {
		r.t.Fatal(err)
	}
	defer q.Close()
	st, err := q.Stats()
	if err != nil {
		r.t.Fatal(err)
	}
	return st.FileSize
}

func readFile(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i]
	}
	return b
}

// drain waits until the agent has nothing pending or in flight.
func (r *rig) drain() *status.Status {
	r.t.Helper()
	start := time.Now()
	client := &http.Client{Timeout: 5 * time.Second}
	var st status.Status
	for {
		resp, err := client.Get("http://" + r.ingest + "/v1/status")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		if err == nil && st.Counts.Pending.Total == 0 && st.Leased == 0 {
			r.drained = time.Since(start)
			return &st
		}
		if time.Since(start) > drainBudget {
			r.dumpLastLog()
			r.t.Fatalf("the backlog did not drain within %s: pending %d, in flight %d, connection %+v (last error: %v)",
				drainBudget, st.Counts.Pending.Total, st.Leased, st.Connection, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// centralSubjects reads every message of the store in RX_MOVEMENTS and
// counts them per key.
func (r *rig) centralSubjects() map[string]int {
	t := r.t
	t.Helper()
	nc := natstest.Connect(t, r.hub.URL())
	defer nc.Close()
	js := natstest.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	filter := central.Subject(storeID, ">")
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	if info.State.Msgs == 0 {
		return counts
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		t.Fatal(err)
	}
	prefix := central.Subject(storeID, "")
	for seen := uint64(0); seen < info.State.Msgs; {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			if tok := strings.TrimPrefix(m.Subject(), prefix); !ledger.IsCheckpointToken(tok) {
				counts[tok]++ // a movement; the store's checkpoints are not
			}
			n++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("read %d of the stream's %d messages, then nothing more", seen, info.State.Msgs)
		}
		seen += uint64(n)
	}
	return counts
}

// quarantine lists the quarantine with `agent dlq list --json` (the agent
// is stopped) and returns the reason per key.
func (r *rig) quarantine() map[string]string {
	r.t.Helper()
	out, err := exec.Command(r.bin, "dlq", "list", "--json", "--data-dir", r.dir).Output()
	if err != nil {
		r.t.Fatalf("agent dlq list --json: %v", err)
	}
	var res dlq.ListResult
	if err := json.Unmarshal(out, &res); err != nil {
		r.t.Fatalf("agent dlq list --json: %v\n%s", err, out)
	}
	m := make(map[string]string, len(res.Items))
	for _, it := range res.Items {
		m[it.Key] = it.Reason
	}
	return m
}

// panics counts the agent runs whose log holds a Go panic or a data race.
func (r *rig) panics() int {
	n := 0
	for i := 1; i <= r.runs; i++ {
		b := readFile(filepath.Join(r.logDir, fmt.Sprintf("agent-%03d.log", i)))
		if bytes.Contains(b, []byte("panic: ")) || bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			n++
		}
	}
	return n
}

// logCount counts the occurrences of s in every agent run's log.
func (r *rig) logCount(s string) int {
	n := 0
	for i := 1; i <= r.runs; i++ {
		n += bytes.Count(readFile(filepath.Join(r.logDir, fmt.Sprintf("agent-%03d.log", i))), []byte(s))
	}
	return n
}

func (r *rig) dumpLastLog() {
	if r.agent != nil {
		r.t.Logf("the last agent run's log (%s):\n%s", r.agent.logPath, tail(r.agent.logPath, 40))
	}
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// submission is one movement the submitter sent.
type submission struct {
	id    string
	key   string
	key16 [16]byte
	body  []byte
	big   bool
}

// submitStats count what the submitter saw.
type submitStats struct {
	requests, acked, allDuplicate, diskFull, unavailable, failed, big int
	otherCodes                                                        map[int]int
}

// submitter posts movements to the agent's ingest listener from its own
// goroutine, like a store's dispensing software: batches of different
// shapes, some resubmitted after an acknowledgement (duplicates), failed
// ones resubmitted later. It records every movement acknowledged with a
// 2xx. Its fields are read only after done is closed.
type submitter struct {
	url    string
	rnd    *rand.Rand
	client *http.Client
	next   int

	tried     map[string]*submission // every movement sent, by key
	acked     map[string]*submission // every movement acknowledged, by key
	retry     [][]*submission        // batches to send again
	sent      [][]*submission        // recent acknowledged batches, to send again as duplicates
	stats     submitStats
	anomalies []string
	done      chan struct{}
}

func newSubmitter(addr string, seed uint64) *submitter {
	return &submitter{
		url:    "http://" + addr + "/v1/movements",
		rnd:    rand.New(rand.NewPCG(seed, 2)),
		client: &http.Client{Timeout: 15 * time.Second},
		tried:  map[string]*submission{},
		acked:  map[string]*submission{},
		stats:  submitStats{otherCodes: map[int]int{}},
		done:   make(chan struct{}),
	}
}

func (s *submitter) run(ctx context.Context) {
	defer close(s.done)
	for ctx.Err() == nil {
		var batch []*submission
		switch p := s.rnd.Float64(); {
		case p < 0.2 && len(s.retry) > 0:
			batch, s.retry = s.retry[0], s.retry[1:]
		case p < 0.25 && len(s.sent) > 0:
			batch = s.sent[s.rnd.IntN(len(s.sent))]
		default:
			batch = s.fresh(1 + s.rnd.IntN(20))
		}
		s.send(ctx, batch)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(2+s.rnd.IntN(15)) * time.Millisecond):
		}
	}
}

// fresh makes n new movements; now and then one is too large for central.
func (s *submitter) fresh(n int) []*submission {
	batch := make([]*submission, n)
	for i := range batch {
		s.next++
		id := fmt.Sprintf("soak-%07d", s.next)
		extra := ""
		if s.rnd.IntN(5) == 0 {
			extra = `,"schedule":"CII"`
		}
		big := s.rnd.IntN(400) == 0
		if big {
			extra += `,"note":"` + strings.Repeat("€", 1000) + `"`
			s.stats.big++
		}
		body := fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":%d,"unit":"EA","occurred_at":%q%s}`,
			id, 1+s.rnd.IntN(30), time.Now().Add(-time.Minute).UTC().Format(time.RFC3339), extra)
		key := movement.KeyString(storeID, id)
		m := &submission{id: id, key: key, key16: keyBytes(key), body: []byte(body), big: big}
		s.tried[key] = m
		batch[i] = m
	}
	return batch
}

// send posts one batch as a single object, an array or NDJSON.
func (s *submitter) send(ctx context.Context, batch []*submission) {
	var body bytes.Buffer
	ctype := "application/json"
	switch {
	case len(batch) == 1 && s.rnd.IntN(2) == 0:
		body.Write(batch[0].body)
	case s.rnd.IntN(2) == 0:
		ctype = "application/x-ndjson"
		for _, m := range batch {
			body.Write(m.body)
			body.WriteByte('\n')
		}
	default:
		body.WriteByte('[')
		for i, m := range batch {
			if i > 0 {
				body.WriteByte(',')
			}
			body.Write(m.body)
		}
		body.WriteByte(']')
	}
	s.stats.requests++
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, &body)
	if err != nil {
		s.anomalies = append(s.anomalies, err.Error())
		return
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			s.stats.failed++
			s.retry = append(s.retry, batch)
		}
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		s.stats.failed++
		s.retry = append(s.retry, batch)
		return
	case resp.StatusCode == http.StatusInsufficientStorage:
		s.stats.diskFull++
		s.retry = append(s.retry, batch)
		return
	case resp.StatusCode == http.StatusServiceUnavailable:
		s.stats.unavailable++
		s.retry = append(s.retry, batch)
		return
	case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted:
		s.stats.otherCodes[resp.StatusCode]++
		s.retry = append(s.retry, batch)
		if resp.StatusCode < 500 {
			s.anomalies = append(s.anomalies, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b)))
		}
		return
	}
	var sub control.Submission
	if err := json.Unmarshal(b, &sub); err != nil || len(sub.Results) != len(batch) {
		s.anomalies = append(s.anomalies, fmt.Sprintf("HTTP %d with %d result(s) for %d movement(s): %s", resp.StatusCode, len(sub.Results), len(batch), b))
		return
	}
	s.stats.acked++
	if sub.Accepted == 0 {
		s.stats.allDuplicate++
	}
	for i, r := range sub.Results {
		m := batch[i]
		if r.MovementID != m.id || r.Key != m.key {
			s.anomalies = append(s.anomalies, fmt.Sprintf("result %d is %s/%s, want %s/%s", i, r.MovementID, r.Key, m.id, m.key))
			continue
		}
		s.acked[m.key] = m
	}
	if len(s.sent) < 1000 {
		s.sent = append(s.sent, batch)
	} else {
		s.sent[s.rnd.IntN(len(s.sent))] = batch
	}
}
