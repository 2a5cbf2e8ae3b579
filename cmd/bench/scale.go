package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/daemon"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
)

const storeScale = "S-SCALE"

// million is the size the scale targets are stated for.
const million = 1_000_000

// benchScale measures what a large backlog costs: the time the agent takes
// to be ready, its heap, the status call, and one step of enqueue and of
// sync, at each backlog size.
//
// Start-up, heap, RSS and status are measured in a child process (this
// binary, run with -ready-child) that runs daemon.Run on a copy of the
// file, so that nothing this process built or cached counts against the
// agent. The file was just written, so it is in the page cache: this is a
// warm start. Step costs are measured here, on all sizes in turn, so that
// a slow moment of the disk hits every size alike. The backlog files are
// built as buildBacklog describes, in random key order.
func benchScale(ctx context.Context, b *bench) error {
	const scn = "3 scale"
	type sized struct {
		n         int
		path      string
		ready     readyResult
		enq, step time.Duration // medians
		fileMiB   float64
		q         *queue.Queue
	}
	var all []*sized
	for _, n := range b.size.scaleNs {
		dir, err := b.dir("scale-" + sizeLabel(n))
		if err != nil {
			return err
		}
		dataDir := filepath.Join(dir, "agent")
		path, err := b.backlog(storeScale, n, dataDir)
		if err != nil {
			return err
		}
		r, err := runReadyChild(ctx, dataDir, storeScale, b.size.statusCalls)
		if err != nil {
			return fmt.Errorf("start-up with %d pending: %w", n, err)
		}
		if r.Pending != uint64(n) {
			return fmt.Errorf("the agent reported %d pending, want %d", r.Pending, n)
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		b.logf("scale: %s pending: ready in %.3f s, heap in use %.1f MiB, RSS %.1f MiB, status p50 %.2f ms",
			sizeLabel(n), r.ReadyS, r.HeapInuseMiB, r.RSSMiB, r.StatusP50Ms)
		all = append(all, &sized{n: n, path: path, ready: r, fileMiB: float64(fi.Size()) / (1 << 20)})
	}

	// Step costs: one single-movement Enqueue (one commit and fsync), and
	// one Lease of one movement plus its Settle (MarkSynced), per size in
	// turn.
	for _, s := range all {
		q, err := queue.Open(queue.Options{Path: s.path, StoreID: storeScale})
		if err != nil {
			return err
		}
		defer q.Close()
		s.q = q
	}
	samples := b.size.stepSamples
	extra := make(map[int][]movement.Prepared)
	for _, s := range all {
		extra[s.n] = generateN(storeScale, s.n, samples, b.now)
	}
	enq := make(map[int][]time.Duration)
	step := make(map[int][]time.Duration)
	for i := range samples {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, s := range all {
			e, y, err := oneStep(s.q, extra[s.n][i], uint64(i+1))
			if err != nil {
				return fmt.Errorf("step with %d pending: %w", s.n, err)
			}
			enq[s.n] = append(enq[s.n], e)
			step[s.n] = append(step[s.n], y)
		}
	}
	for _, s := range all {
		s.enq = quantile(enq[s.n], 0.5)
		s.step = quantile(step[s.n], 0.5)
		b.logf("scale: %s pending: enqueue step %.3f ms, sync step %.3f ms (medians of %d)", sizeLabel(s.n), ms(s.enq), ms(s.step), samples)
		s.q.Close()
	}

	small := all[0]
	for _, s := range all {
		l := sizeLabel(s.n)
		is1m := s.n == million
		pick := func(t *target) *target {
			if is1m {
				return t
			}
			return nil
		}
		b.rep.value(scn, "backlog_"+l+"_ready_s", fmt.Sprintf("%s pending: daemon.Run to Ready", l), s.ready.ReadyS, "s", pick(atMost(1)))
		b.rep.value(scn, "backlog_"+l+"_heap_mib", fmt.Sprintf("%s pending: HeapInuse after GC once ready", l), s.ready.HeapInuseMiB, "MiB", pick(atMost(64)))
		if s.ready.RSSMiB > 0 {
			b.rep.value(scn, "backlog_"+l+"_rss_mib", fmt.Sprintf("%s pending: VmRSS once ready (anonymous %.1f MiB; file-backed %.1f MiB: the binary and the touched pages of the mapped data file)", l, s.ready.RssAnonMiB, s.ready.RssFileMiB), s.ready.RSSMiB, "MiB", nil)
		}
		b.rep.value(scn, "status_"+l+"_ms", fmt.Sprintf("%s pending: GET /v1/status over the control socket, p50 of %d (p99 %.2f ms)", l, b.size.statusCalls, s.ready.StatusP99Ms), s.ready.StatusP50Ms, "ms", pick(atMost(50)))
		b.rep.value(scn, "enqueue_step_"+l+"_ms", fmt.Sprintf("%s pending: one single-movement Enqueue (commit + fsync), median of %d", l, samples), ms(s.enq), "ms", nil)
		b.rep.value(scn, "sync_step_"+l+"_ms", fmt.Sprintf("%s pending: Lease of one + MarkSynced (commit + fsync), median of %d", l, samples), ms(s.step), "ms", nil)
		b.rep.value(scn, "backlog_"+l+"_file_mib", fmt.Sprintf("%s pending: data file size", l), s.fileMiB, "MiB", nil)
		if s == small {
			continue
		}
		re := float64(s.enq) / float64(small.enq)
		rs := float64(s.step) / float64(small.step)
		b.rep.ratio(scn, "step_cost_"+l+"_vs_"+sizeLabel(small.n), fmt.Sprintf("step cost with %s pending vs %s: max(enqueue %.2f×, sync %.2f×)", l, sizeLabel(small.n), re, rs),
			max(re, rs), fmt.Sprintf("%s pending: enqueue %.3f ms, sync %.3f ms", sizeLabel(small.n), ms(small.enq), ms(small.step)), pick(atMost(2)))
	}
	if !containsSize(b.size.scaleNs, million) {
		why := "quick run: no 1M backlog is built"
		b.rep.missing(scn, "backlog_1m_heap_mib", "1m pending: HeapInuse after GC once ready", atMost(64), why)
		b.rep.missing(scn, "backlog_1m_ready_s", "1m pending: daemon.Run to Ready", atMost(1), why)
		b.rep.missing(scn, "status_1m_ms", "1m pending: GET /v1/status p50", atMost(50), why)
		b.rep.missing(scn, "step_cost_1m_vs_10k", "step cost with 1m pending vs 10k", atMost(2), why)
	}
	if runtime.GOOS != "linux" {
		b.rep.note("RSS is read from /proc/self/status and is not measured on " + runtime.GOOS + ".")
	}
	return nil
}

// oneStep times one single-movement Enqueue of p, then one Lease of one
// movement and its MarkSynced (as central sequence streamSeq).
func oneStep(q *queue.Queue, p movement.Prepared, streamSeq uint64) (enq, sync time.Duration, err error) {
	t0 := time.Now()
	if _, err := q.Enqueue([]movement.Prepared{p}); err != nil {
		return 0, 0, err
	}
	enq = time.Since(t0)
	t0 = time.Now()
	recs, err := q.Lease(time.Now(), 1)
	if err != nil {
		return 0, 0, err
	}
	if len(recs) != 1 {
		return 0, 0, fmt.Errorf("lease returned %d movements, want 1", len(recs))
	}
	if err := q.Settle(queue.Settlement{Acks: []queue.Ack{{Seq: recs[0].Seq, StreamSeq: streamSeq}}}); err != nil {
		return 0, 0, err
	}
	return enq, time.Since(t0), nil
}

func containsSize(ns []int, n int) bool {
	for _, m := range ns {
		if m == n {
			return true
		}
	}
	return false
}

// readyResult is what the child process measured.
type readyResult struct {
	ReadyS       float64 `json:"ready_s"`
	HeapInuseMiB float64 `json:"heap_inuse_mib"`
	HeapAllocMiB float64 `json:"heap_alloc_mib"`
	RSSMiB       float64 `json:"rss_mib"` // 0 where not measured
	RssAnonMiB   float64 `json:"rss_anon_mib"`
	RssFileMiB   float64 `json:"rss_file_mib"`
	StatusP50Ms  float64 `json:"status_p50_ms"`
	StatusP99Ms  float64 `json:"status_p99_ms"`
	Pending      uint64  `json:"pending"`
}

// runReadyChild runs this binary with -ready-child on dataDir and returns
// what it measured.
func runReadyChild(ctx context.Context, dataDir, store string, calls int) (readyResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return readyResult{}, err
	}
	cmd := exec.CommandContext(ctx, exe, "-ready-child", dataDir, "-ready-store", store, "-ready-calls", strconv.Itoa(calls))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return readyResult{}, fmt.Errorf("%s -ready-child: %w: %s", filepath.Base(exe), err, strings.TrimSpace(errb.String()))
	}
	var r readyResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return readyResult{}, fmt.Errorf("reading the child's measurements: %w", err)
	}
	return r, nil
}

// readyChild is the child process of runReadyChild.
func readyChild(ctx context.Context, dataDir, store string, calls int, stdout io.Writer) error {
	r, err := measureReady(ctx, dataDir, store, calls)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(r)
}

// measureReady runs the agent (daemon.Run with its ingest listener and
// control socket, no central configured) on dataDir and measures the time
// until it is ready, the heap in use after a GC once it is, the process's
// RSS, and GET /v1/status over the control socket.
func measureReady(ctx context.Context, dataDir, store string, calls int) (readyResult, error) {
	c := settings.Config{StoreID: store, DataDir: dataDir}
	c.Ingest.Listen = "127.0.0.1:0"
	o, err := c.Validate()
	if err != nil {
		return readyResult{}, err
	}
	actx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan time.Duration, 1)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- daemon.Run(actx, o, nil, daemon.Hooks{Ready: func(string) { ready <- time.Since(start) }})
	}()
	var r readyResult
	select {
	case d := <-ready:
		r.ReadyS = d.Seconds()
	case err := <-done:
		return r, fmt.Errorf("the agent stopped before it was ready: %v", err)
	case <-time.After(2 * time.Minute):
		return r, errors.New("the agent was not ready within 2 minutes")
	}

	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	r.HeapInuseMiB = float64(m.HeapInuse) / (1 << 20)
	r.HeapAllocMiB = float64(m.HeapAlloc) / (1 << 20)
	if st, err := procStatus(); err == nil {
		r.RSSMiB, r.RssAnonMiB, r.RssFileMiB = st["VmRSS"], st["RssAnon"], st["RssFile"]
	}

	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", control.Endpoint(dataDir))
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	lat := make([]time.Duration, 0, calls)
	for range calls {
		t0 := time.Now()
		st, err := getStatus(ctx, client, "http://agent/v1/status")
		if err != nil {
			return r, err
		}
		lat = append(lat, time.Since(t0))
		r.Pending = st.Counts.Pending.Total
	}
	r.StatusP50Ms = ms(quantile(lat, 0.5))
	r.StatusP99Ms = ms(quantile(lat, 0.99))
	stop()
	if err := <-done; err != nil {
		return r, fmt.Errorf("agent: %w", err)
	}
	return r, nil
}

// procStatus reads the memory lines of /proc/self/status, in MiB.
func procStatus() (map[string]float64, error) { return procStatusOf("self") }

// procStatusOf reads the memory lines of /proc/<pid>/status, in MiB.
func procStatusOf(pid string) (map[string]float64, error) {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make(map[string]float64)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(name, "VmRSS") && !strings.HasPrefix(name, "Rss") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		kb, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		out[name] = kb / 1024
	}
	return out, sc.Err()
}
