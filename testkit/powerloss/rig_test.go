package powerloss

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/powerfs"
	"github.com/rxedge/agent/testkit/syncbuf"
)

func TestMain(m *testing.M) {
	code := m.Run()
	agentbin.Cleanup()
	os.Exit(code)
}

const storeID = "S0042"

// full reports whether RXEDGE_POWERLOSS=full asks for the long run.
func full() bool { return os.Getenv("RXEDGE_POWERLOSS") == "full" }

// cuts is the number of cuts a scenario makes: short in the default run,
// at least 50 in the full one.
func cuts(short int) int {
	if full() {
		return max(50, short)
	}
	return short
}

// seed is the run's random seed, from RXEDGE_POWERLOSS_SEED when set.
func seed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("RXEDGE_POWERLOSS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RXEDGE_POWERLOSS_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// rig is one data directory on a powerfs filesystem, the agent that runs
// on it, and what the test knows must survive a power cut.
type rig struct {
	t    *testing.T
	bin  string
	fs   *powerfs.FS
	m    *powerfs.Mount
	mnt  string
	data string // the data directory, inside mnt
	cfg  string // the agent's configuration, outside mnt
	rnd  *rand.Rand
	hub  *natstest.Server // central, when the scenario has one

	agent *agent
	addr  string // the agent's ingest address
	next  int    // the last movement number handed out (under mu)

	mu     stdsync.Mutex
	acked  map[string]string // movement id → key, for every 2xx answer
	expect []expectation     // completed commands whose effects must survive
	starts int               // agent runs that became ready on this data directory

	cuts      int
	torn      int // cuts that kept a random part of the unsynced writes
	lastOps   int // changing requests before the last cut
	totalAcks int
	held      string // the states held at the last check
	fileID    string // the data file's identity at the last check
	// logSize and checkpoints are the log's size and the checkpoints
	// signed, at the last check.
	logSize     int64
	checkpoints int
}

// expectation is what one completed command left behind.
type expectation struct {
	what    string      // the command, for messages
	action  string      // a journal action it wrote ...
	keys    []string    // ... naming each of these keys
	count   int         // ... at least this many entries of it in all
	state   queue.State // when set, the state every key must be in
	file    string      // when set, a file that must exist (or orFile) ...
	orFile  string      // ... when set, where file may be instead
	content []string    // ... holding each of these strings
	lines   int         // ... and at least this many lines
}

func newRig(t *testing.T) *rig {
	t.Helper()
	if err := powerfs.Available(); err != nil {
		t.Skipf("power-loss tests need a FUSE mount: %v", err)
	}
	s := seed(t)
	t.Logf("seed %d (repeat with RXEDGE_POWERLOSS_SEED=%d)", s, s)
	r := &rig{
		t:     t,
		bin:   agentbin.Build(t),
		fs:    powerfs.New(powerfs.Options{Seed: s}),
		rnd:   rand.New(rand.NewPCG(s, s>>1)),
		acked: map[string]string{},
	}
	// A short mount point keeps the control socket's path under the
	// limit of unix socket addresses.
	mnt, err := os.MkdirTemp("", "rxpl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(mnt) })
	r.mnt = mnt
	if r.m, err = r.fs.Mount(mnt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.kill()
		if err := r.m.Unmount(); err != nil {
			t.Error(err)
		}
	})
	// The data directory exists, durably, as an installation leaves it.
	r.data = filepath.Join(mnt, "data")
	if err := os.Mkdir(r.data, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(mnt); err != nil {
		t.Fatal(err)
	}
	r.cfg = filepath.Join(t.TempDir(), "agent.yaml")
	// A short resume jitter: the drain starts as soon as the agent is up.
	if err := os.WriteFile(r.cfg, []byte("sync:\n  resume_jitter: 10ms\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.addr = agentbin.FreeAddr(t)
	return r
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func copyFile(dst, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// useDataDir moves the rig to another data directory, forgetting what it
// expected of the one before.
func (r *rig) useDataDir(dir string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data = dir
	r.acked = map[string]string{}
	r.expect = nil
	r.starts = 0
}

// agent is one run of the built binary.
type agent struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	exited chan error
}

// start runs `agent run` on the data directory, with central when the rig
// has a hub and nats is true, and waits until it is ready. It returns false
// when the power went off before that.
func (r *rig) start(nats bool) bool {
	r.t.Helper()
	args := []string{"run", "--config", r.cfg, "--store-id", storeID, "--data-dir", r.data, "--ingest", r.addr, "--log-level", "warn"}
	if nats && r.hub != nil {
		args = append(args, "--nats", r.hub.URL())
	}
	cmd := exec.Command(r.bin, args...)
	a := &agent{cmd: cmd, stderr: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = io.Discard, a.stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.agent = a
	go func() { a.exited <- cmd.Wait() }()
	off := r.fs.Off()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + r.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				// A ready agent has journalled its start.
				r.mu.Lock()
				r.starts++
				r.mu.Unlock()
				return true
			}
		}
		select {
		case <-off:
			return false
		case err := <-a.exited:
			a.exited <- err
			select {
			case <-off:
				return false
			default:
			}
			r.t.Fatalf("cut %d: the agent exited before it was ready, with the power on: %v\n%s", r.cuts, err, a.stderr)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("cut %d: the agent is not ready after 15s\n%s", r.cuts, a.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the running agent with SIGKILL and waits for it.
func (r *rig) kill() {
	a := r.agent
	if a == nil {
		return
	}
	r.agent = nil
	a.cmd.Process.Kill()
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		r.t.Errorf("the agent did not exit 10s after SIGKILL")
	}
}

// movementJSON is a valid movement with the given id.
func movementJSON(id, note string) string {
	extra := ""
	if note != "" {
		extra = fmt.Sprintf(`,"note":%q`, note)
	}
	return fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"%s}`, id, extra)
}

// post submits n new movements (with note, when set) and records them as
// acknowledged when the agent answers 2xx. It returns the keys of the
// acknowledged movements.
func (r *rig) post(client *http.Client, n int, note string) []string {
	r.mu.Lock()
	ids := make([]string, n)
	body := make([]string, n)
	for i := range ids {
		r.next++
		ids[i] = fmt.Sprintf("M%07d", r.next)
		body[i] = movementJSON(ids[i], note)
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.addr+"/v1/movements", strings.NewReader("["+strings.Join(body, ",")+"]"))
	if err != nil {
		return nil
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode/100 != 2 {
		return nil // not acknowledged
	}
	var ans struct {
		Results []struct {
			MovementID string `json:"movement_id"`
			Key        string `json:"key"`
		} `json:"results"`
	}
	if err := json.Unmarshal(data, &ans); err != nil || len(ans.Results) != n {
		r.t.Errorf("a 2xx answer that does not name the %d movements: %q", n, data)
		return nil
	}
	keys := make([]string, n)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, res := range ans.Results {
		if res.MovementID != ids[i] || res.Key != movement.KeyString(storeID, ids[i]) {
			r.t.Errorf("answer %d: %s with key %s, want %s with key %s", i, res.MovementID, res.Key, ids[i], movement.KeyString(storeID, ids[i]))
		}
		r.acked[ids[i]] = res.Key
		keys[i] = res.Key
	}
	r.totalAcks += n
	return keys
}

// load posts batches of 1 to 4 movements from several clients until stop
// is closed.
func (r *rig) load(clients int, stop <-chan struct{}) {
	var wg stdsync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			for n := 1; ; n = n%4 + 1 {
				select {
				case <-stop:
					return
				default:
				}
				r.post(client, n, "")
			}
		})
	}
	wg.Wait()
}

// loadUntilCut runs load until the power goes off, or cuts it after limit.
func (r *rig) loadUntilCut(clients int, limit time.Duration) {
	stop := make(chan struct{})
	off := r.fs.Off()
	go func() {
		select {
		case <-off:
		case <-time.After(limit):
			r.fs.Cut()
		}
		close(stop)
	}()
	r.load(clients, stop)
}

// cli runs a command of the built binary and returns its exit code and
// output.
func (r *rig) cli(args ...string) (int, string, string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	r.t.Fatalf("agent %v: %v", args, err)
	return 0, "", ""
}

// expectAfter records what a completed command must leave behind.
func (r *rig) expectAfter(e expectation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expect = append(r.expect, e)
}

// powerCycle cuts the power (if no trigger did), kills the agent, mounts
// the filesystem again with what the cut kept, and checks it.
func (r *rig) powerCycle() {
	r.t.Helper()
	r.lastOps = r.fs.Seq()
	r.fs.Cut()
	r.fs.CutWhen(nil)
	r.kill()
	if err := r.m.Unmount(); err != nil {
		r.t.Fatal(err)
	}
	m, err := r.fs.Mount(r.mnt)
	if err != nil {
		r.t.Fatal(err)
	}
	r.m = m
	r.cuts++
	r.check()
}

// arm arms a cut at a random request among the next n, with a random
// choice of a strict cut or a torn one.
func (r *rig) arm(n int) {
	r.armTorn()
	r.fs.CutAfter(1 + r.rnd.IntN(n))
}

// armTorn chooses whether the next cut keeps exactly what was synced (the
// first cut and every second one: those find a missing fsync every time)
// or also a random part of what was not.
func (r *rig) armTorn() {
	if r.cuts%2 == 0 {
		r.fs.SetTorn(0)
		return
	}
	r.torn++
	r.fs.SetTorn(0.1 + 0.8*r.rnd.Float64())
}

// check opens the data file as the agent would and checks what must
// have survived.
func (r *rig) check() {
	t := r.t
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	path := filepath.Join(r.data, "agent.db")
	r.fileID = ""
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(path + queue.MarkerSuffix); err == nil {
			t.Fatalf("cut %d: %s is gone and its marker is not: the agent would refuse to start", r.cuts, path)
		}
		if len(r.acked) > 0 || len(r.expect) > 0 || r.starts > 0 {
			t.Fatalf("cut %d: %s is gone after the power cut, with %d movements acknowledged, %d commands completed and %d starts", r.cuts, path, len(r.acked), len(r.expect), r.starts)
		}
		return
	}
	// A marker names the file beside it, never one that is gone (or the
	// agent would refuse to start on the directory). It names two files
	// only while the file changes its identity, one of them the file's.
	marker, merr := os.ReadFile(path + queue.MarkerSuffix)
	if ids := strings.Fields(string(marker)); merr == nil && len(ids) > 0 {
		defer func() {
			if id := r.fileID; id != "" && !slices.Contains(ids, id) || len(ids) > 2 {
				t.Fatalf("cut %d: the marker names files %q, the data file is %s", r.cuts, ids, id)
			}
		}()
	}
	// Open a copy: bbolt maps its file into memory, and a process must not
	// fault on pages of a FUSE mount it serves itself (the fault can hold
	// the memory map lock the server's runtime needs).
	copied := filepath.Join(r.t.TempDir(), "agent.db")
	if err := copyFile(copied, path); err != nil {
		t.Fatalf("cut %d: reading the data file after the power cut: %v", r.cuts, err)
	}
	r.checkLog(copied)
	q, err := queue.Open(queue.Options{Path: copied, StoreID: storeID})
	if err != nil {
		t.Fatalf("cut %d: the data file does not open after the power cut: %v", r.cuts, err)
	}
	defer q.Close()
	if err := q.Verify(); err != nil {
		t.Fatalf("cut %d: Verify after the power cut: %v", r.cuts, err)
	}
	if r.fileID = q.Lineage().FileID; r.fileID == "" {
		t.Fatalf("cut %d: the data file has no identity after the power cut", r.cuts)
	}
	journal := map[string]map[string]bool{} // action → keys named
	entries := map[string]int{}             // action → entries
	err = q.Events(time.Time{}, func(ev queue.Event) bool {
		if journal[ev.Action] == nil {
			journal[ev.Action] = map[string]bool{}
		}
		entries[ev.Action]++
		for _, k := range ev.Keys {
			journal[ev.Action][k] = true
		}
		return true
	})
	if err != nil {
		t.Fatalf("cut %d: reading the journal: %v", r.cuts, err)
	}
	var stream jetstream.Stream // central's
	if r.hub != nil {
		js := natstest.JetStream(t, natstest.Connect(t, r.hub.URL()))
		if stream, err = js.Stream(context.Background(), central.StreamName); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := q.Stats(); err == nil {
		r.held = fmt.Sprintf("pending %d, synced %d, quarantined %d, purged %d", st.Count(queue.Pending), st.Count(queue.Synced), st.Count(queue.Quarantined), st.Count(queue.Purged))
	}
	for id, key := range r.acked {
		k, ok := movement.ParseKey(key)
		if !ok {
			t.Fatalf("bad key %q", key)
		}
		e, err := q.Get(k)
		if err != nil {
			t.Fatalf("cut %d: acknowledged movement %s (key %s) is missing after the power cut: %v", r.cuts, id, key, err)
		}
		switch e.State {
		case queue.Pending:
			if e.Record == nil || e.Record.MovementID != id {
				t.Fatalf("cut %d: acknowledged movement %s is pending with record %+v", r.cuts, id, e.Record)
			}
		case queue.Quarantined, queue.Purged:
			action := queue.ActionQuarantine
			if e.State == queue.Purged {
				action = queue.ActionPurge
			}
			if !journal[action][key] {
				t.Fatalf("cut %d: movement %s is %s, and no %s entry in the journal names it", r.cuts, key, e.State, action)
			}
		case queue.Synced:
			if stream == nil {
				t.Fatalf("cut %d: movement %s is synced with no central", r.cuts, key)
			}
			if _, err := stream.GetLastMsgForSubject(context.Background(), central.Subject(storeID, key)); err != nil {
				t.Fatalf("cut %d: movement %s is synced, but central does not hold it: %v", r.cuts, key, err)
			}
		}
	}
	if entries[queue.ActionStart] < r.starts {
		t.Fatalf("cut %d: the agent became ready %d times, and the journal has %d start entries", r.cuts, r.starts, entries[queue.ActionStart])
	}
	for _, x := range r.expect {
		if entries[x.action] < x.count {
			t.Fatalf("cut %d: %s completed, and the journal has %d %s entries, want at least %d", r.cuts, x.what, entries[x.action], x.action, x.count)
		}
		for _, key := range x.keys {
			if !journal[x.action][key] {
				t.Fatalf("cut %d: %s completed, and no %s entry in the journal names %s", r.cuts, x.what, x.action, key)
			}
			if x.state != 0 {
				k, _ := movement.ParseKey(key)
				if e, err := q.Get(k); err != nil || e.State != x.state {
					t.Fatalf("cut %d: %s completed, and %s is %v (%v), want %s", r.cuts, x.what, key, e.State, err, x.state)
				}
			}
		}
		if file := x.file; file != "" {
			b, err := os.ReadFile(file)
			if errors.Is(err, fs.ErrNotExist) && x.orFile != "" {
				file = x.orFile
				if b, err = os.ReadFile(file); err != nil {
					t.Fatalf("cut %d: %s, and its file is gone after the power cut: neither %s nor %s is there (%v)", r.cuts, x.what, x.file, x.orFile, err)
				}
			}
			if err != nil {
				t.Fatalf("cut %d: %s completed, and its file is gone after the power cut: %v", r.cuts, x.what, err)
			}
			if n := bytes.Count(b, []byte("\n")); n < x.lines {
				t.Fatalf("cut %d: %s completed, and %s holds %d lines after the power cut, want %d", r.cuts, x.what, file, n, x.lines)
			}
			for _, s := range x.content {
				if !bytes.Contains(b, []byte(s)) {
					t.Fatalf("cut %d: %s completed, and %s lacks %s after the power cut", r.cuts, x.what, file, s)
				}
			}
		}
	}
}

// waitStatus polls the agent's status until ok accepts it.
func (r *rig) waitStatus(what string, limit time.Duration, ok func(counts) bool) {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	var last counts
	for {
		resp, err := http.Get("http://" + r.addr + "/v1/status")
		if err == nil {
			var st struct {
				Counts counts `json:"counts"`
			}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil {
				last = st.Counts
				if ok(last) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("cut %d: %s: not reached after %s (counts %+v)", r.cuts, what, limit, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// counts is the part of the agent's status the tests wait on.
type counts struct {
	Pending     classCounts `json:"pending"`
	Synced      classCounts `json:"synced"`
	Quarantined classCounts `json:"quarantined"`
}

type classCounts struct {
	Controlled uint64 `json:"controlled"`
	Ordinary   uint64 `json:"ordinary"`
}

func (c classCounts) total() uint64 { return c.Controlled + c.Ordinary }

// quarantined lists the quarantined keys with `agent dlq list --json`.
func (r *rig) quarantined() []string {
	r.t.Helper()
	code, out, errOut := r.cli("dlq", "list", "--json", "--data-dir", r.data)
	if code != 0 {
		return nil // the power may be off
	}
	var res struct {
		Items []struct {
			Key string `json:"key"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		r.t.Fatalf("agent dlq list --json: %v\n%s%s", err, out, errOut)
	}
	keys := make([]string, len(res.Items))
	for i, it := range res.Items {
		keys[i] = it.Key
	}
	return keys
}

var exportedTo = regexp.MustCompile(`exported (\d+) movement\(s\) to (\S+)`)

// exported parses "exported N movement(s) to FILE" from a command's output.
func exported(out string) (int, string, bool) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := exportedTo.FindStringSubmatch(sc.Text()); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n, m[2], true
		}
	}
	return 0, "", false
}

// summary logs what the scenario did.
func (r *rig) summary() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Logf("%d power cuts (%d torn), %d movements acknowledged in all, %d commands completed, %d changing filesystem requests; held at the last check: %s; log of %d leaves, %d checkpoints signed", r.cuts, r.torn, r.totalAcks, len(r.expect), r.fs.Seq(), r.held, r.logSize, r.checkpoints)
}
