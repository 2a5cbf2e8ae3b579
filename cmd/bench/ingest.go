package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/daemon"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
)

const storeIngest = "S-INGEST"

// benchIngest compares the agent's intake with the naive way to make every
// acknowledged movement durable: one bbolt Update (one fsync) per movement.
//
// The machines this runs on are noisy: the same fsync can take five times
// longer a minute later. So the three take turns in rounds, each round a
// slice of the movements (the naive baseline's slices are smaller: it is a
// rate), with the order changed every round; each rate is the total over
// its rounds.
func benchIngest(ctx context.Context, b *bench) error {
	const scn = "1 ingest"
	s := b.size
	items := generateN(storeIngest, 0, s.ingestN, b.now)
	naiveItems := items[:min(s.naiveN, len(items))]

	dir, err := b.dir("ingest-naive")
	if err != nil {
		return err
	}
	naiveDB, err := openNaive(filepath.Join(dir, "naive.db"))
	if err != nil {
		return fmt.Errorf("naive baseline: %w", err)
	}
	defer naiveDB.Close()

	if dir, err = b.dir("ingest-http"); err != nil {
		return err
	}
	agent, err := startAgent(ctx, dir)
	if err != nil {
		return err
	}
	defer agent.stop()
	client := newClient(s.ingestConns)
	defer client.CloseIdleConnections()

	if dir, err = b.dir("ingest-http-batch"); err != nil {
		return err
	}
	hb, err := startHTTPBatch(filepath.Join(dir, "batch.db"))
	if err != nil {
		return fmt.Errorf("HTTP batch baseline: %w", err)
	}
	defer hb.close()

	if dir, err = b.dir("ingest-queue"); err != nil {
		return err
	}
	q, err := queue.Open(queue.Options{Path: settings.DataFile(dir), StoreID: storeIngest})
	if err != nil {
		return err
	}
	defer q.Close()
	commits := q.Commits()

	var naive, web, inproc, batch ingestResult
	var lat, batchLat []time.Duration
	var roundRatios []float64
	rounds := s.ingestRounds
	for r := range rounds {
		lo, hi := r*len(items)/rounds, (r+1)*len(items)/rounds
		nlo, nhi := r*len(naiveItems)/rounds, (r+1)*len(naiveItems)/rounds
		var nr, wr ingestResult
		doNaive := func() error {
			var err error
			if nr, err = naiveIngest(naiveDB, naiveItems[nlo:nhi]); err != nil {
				return fmt.Errorf("naive baseline: %w", err)
			}
			naive = naive.plus(nr)
			return nil
		}
		doHTTP := func() error {
			res, l, err := postAll(ctx, client, agent.addr, items[lo:hi], s.ingestConns)
			if err != nil {
				return fmt.Errorf("HTTP ingest: %w", err)
			}
			wr = res
			web = web.plus(res)
			lat = append(lat, l...)
			return nil
		}
		doQueue := func() error {
			res, err := queueIngest(ctx, q, items[lo:hi], s.ingestConns)
			if err != nil {
				return fmt.Errorf("in-process enqueue: %w", err)
			}
			inproc = inproc.plus(res)
			return nil
		}
		doBatch := func() error {
			res, l, err := postAll(ctx, client, hb.addr, items[lo:hi], s.ingestConns)
			if err != nil {
				return fmt.Errorf("HTTP batch baseline: %w", err)
			}
			batch = batch.plus(res)
			batchLat = append(batchLat, l...)
			return nil
		}
		steps := []func() error{doNaive, doBatch, doHTTP, doQueue}
		if r%2 == 1 {
			steps = []func() error{doQueue, doHTTP, doBatch, doNaive}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		roundRatios = append(roundRatios, wr.rate/nr.rate)
		b.logf("ingest: round %d/%d: naive %s mov/s, HTTP %s mov/s", r+1, rounds, thousands(nr.rate), thousands(wr.rate))
	}
	web.p50, web.p99 = quantile(lat, 0.50), quantile(lat, 0.99)
	batch.p50, batch.p99 = quantile(batchLat, 0.50), quantile(batchLat, 0.99)
	inproc.perCommit = float64(inproc.n) / float64(max(q.Commits()-commits, 1))
	b.logf("ingest: naive %s; HTTP %s; queue %s; HTTP batch baseline %s", naive, web, inproc, batch)
	if got, err := hb.count(); err != nil || got != len(items) {
		return fmt.Errorf("the HTTP batch baseline holds %d movements after %d were acknowledged (%v)", got, len(items), err)
	}

	// Every movement acknowledged is pending in the agent's file.
	st, err := getStatus(ctx, client, "http://"+agent.addr+"/v1/status")
	if err != nil {
		return err
	}
	if st.Counts.Pending.Total != uint64(len(items)) {
		return fmt.Errorf("the agent holds %d pending movements after %d were acknowledged", st.Counts.Pending.Total, len(items))
	}
	if err := agent.stop(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	qs, err := q.Stats()
	if err != nil {
		return err
	}
	if got := qs.Count(queue.Pending); got != uint64(len(items)) {
		return fmt.Errorf("the queue holds %d pending movements after %d were enqueued", got, len(items))
	}

	slices.Sort(roundRatios)
	base := fmt.Sprintf("naive: one bbolt Update (fsync) per movement, sequential, %s movements in the same %d rounds: %s mov/s",
		thousands(float64(naive.n)), rounds, thousands(naive.rate))
	b.rep.ratio(scn, "ingest_vs_naive", fmt.Sprintf("HTTP ingest (daemon.Run, %d keep-alive clients, one movement per request, %s movements) vs naive", s.ingestConns, thousands(float64(web.n))),
		web.rate/naive.rate, base, atLeast(20))
	b.rep.value(scn, "ingest_vs_naive_round_median", fmt.Sprintf("the same ratio round by round: median (min %.1f, max %.1f)", roundRatios[0], roundRatios[len(roundRatios)-1]),
		roundRatios[len(roundRatios)/2], "", nil)
	b.rep.value(scn, "ingest_http_rate", "HTTP ingest rate", web.rate, "mov/s", nil)
	b.rep.value(scn, "ingest_http_p50_ms", "HTTP ack latency p50 (after fsync)", ms(web.p50), "ms", nil)
	b.rep.value(scn, "ingest_http_p99_ms", "HTTP ack latency p99 (after fsync)", ms(web.p99), "ms", nil)
	b.rep.value(scn, "ingest_naive_rate", "naive rate", naive.rate, "mov/s", nil)
	b.rep.ratio(scn, "ingest_vs_http_batch", fmt.Sprintf("HTTP ingest, the same %s movements (%s mov/s; ack p50 %.2f ms, p99 %.2f ms) vs a trivial HTTP handler", thousands(float64(web.n)), thousands(web.rate), ms(web.p50), ms(web.p99)),
		web.rate/batch.rate, fmt.Sprintf("net/http handler putting the raw body under a counter with bbolt DB.Batch (MaxBatchSize %d), answered after its commit, the same %d keep-alive clients and rounds: %s mov/s, p50 %.2f ms, p99 %.2f ms",
			httpBatchMax, s.ingestConns, thousands(batch.rate), ms(batch.p50), ms(batch.p99)), atLeast(0.5))
	b.rep.value(scn, "ingest_http_batch_rate", "HTTP batch baseline rate", batch.rate, "mov/s", nil)
	b.rep.value(scn, "ingest_http_batch_p99_ms", "HTTP batch baseline ack latency p99 (after its commit)", ms(batch.p99), "ms", nil)
	b.rep.ratio(scn, "ingest_queue_vs_naive", fmt.Sprintf("queue.Enqueue in-process (%d goroutines, one movement per call) vs naive", s.ingestConns),
		inproc.rate/naive.rate, base, nil)
	b.rep.value(scn, "ingest_queue_rate", "queue.Enqueue in-process rate", inproc.rate, "mov/s", nil)
	b.rep.value(scn, "ingest_queue_group_avg", "movements per group commit (in-process)", inproc.perCommit, "", nil)
	return b.decodeCost(scn)
}

// ingestResult is the outcome of one ingest method.
type ingestResult struct {
	n         int
	elapsed   time.Duration
	rate      float64
	p50, p99  time.Duration
	perCommit float64
}

func (r ingestResult) plus(o ingestResult) ingestResult {
	s := ingestResult{n: r.n + o.n, elapsed: r.elapsed + o.elapsed}
	s.rate = rate(s.n, s.elapsed)
	return s
}

func (r ingestResult) String() string {
	s := fmt.Sprintf("%d movements in %s: %s mov/s", r.n, r.elapsed.Round(time.Millisecond), thousands(r.rate))
	if r.p50 > 0 {
		s += fmt.Sprintf(", p50 %.2f ms, p99 %.2f ms", ms(r.p50), ms(r.p99))
	}
	if r.perCommit > 0 {
		s += fmt.Sprintf(", %.1f per commit", r.perCommit)
	}
	return s
}

// naiveBucket is the one bucket of the naive baseline's file.
var naiveBucket = []byte("movements")

// openNaive creates the naive baseline's file: plain bbolt, one bucket.
func openNaive(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(naiveBucket)
		return err
	}); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// naiveIngest stores each movement's canonical payload under its key, one
// Update (and fsync) per movement, sequentially.
func naiveIngest(db *bolt.DB, items []movement.Prepared) (ingestResult, error) {
	start := time.Now()
	for i := range items {
		it := &items[i]
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(naiveBucket).Put(it.Key[:], it.Payload)
		}); err != nil {
			return ingestResult{}, err
		}
	}
	el := time.Since(start)
	return ingestResult{n: len(items), elapsed: el, rate: rate(len(items), el)}, nil
}

// agent is the whole agent (daemon.Run, no central configured) running
// with its ingest listener on a loopback port.
type agent struct {
	addr    string
	cancel  context.CancelFunc
	done    chan error
	stopped bool
	err     error
}

func startAgent(ctx context.Context, dataDir string) (*agent, error) {
	c := settings.Config{StoreID: storeIngest, DataDir: dataDir}
	c.Ingest.Listen = "127.0.0.1:0"
	o, err := c.Validate()
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	a := &agent{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		a.done <- daemon.Run(actx, o, nil, daemon.Hooks{Ready: func(addr string) { ready <- addr }})
	}()
	select {
	case a.addr = <-ready:
		return a, nil
	case err := <-a.done:
		cancel()
		return nil, fmt.Errorf("the agent stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		a.stop()
		return nil, errors.New("the agent was not ready within 30s")
	}
}

// stop shuts the agent down and returns how it ended; it is safe to call
// more than once.
func (a *agent) stop() error {
	if !a.stopped {
		a.stopped = true
		a.cancel()
		a.err = <-a.done
	}
	return a.err
}

// newClient is an HTTP client keeping conns connections alive.
func newClient(conns int) *http.Client {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// postAll posts every movement to the ingest listener at addr from conns
// concurrent clients, one movement per request, and times each request
// until its answer, which comes only after the movement's group commit
// was fsynced.
func postAll(ctx context.Context, client *http.Client, addr string, items []movement.Prepared, conns int) (ingestResult, []time.Duration, error) {
	url := "http://" + addr + "/v1/movements"
	lat := make([]time.Duration, len(items))
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range conns {
		g.Go(func() error {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(items) {
					return nil
				}
				t0 := time.Now()
				req, err := http.NewRequestWithContext(gctx, http.MethodPost, url, bytes.NewReader(items[i].Payload))
				if err != nil {
					return err
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					return fmt.Errorf("movement %d: HTTP %d: %s", i, resp.StatusCode, bytes.TrimSpace(body))
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	if err := g.Wait(); err != nil {
		return ingestResult{}, nil, err
	}
	el := time.Since(start)
	return ingestResult{n: len(items), elapsed: el, rate: rate(len(items), el)}, lat, nil
}

func getStatus(ctx context.Context, client *http.Client, url string) (*status.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/status: HTTP %d", resp.StatusCode)
	}
	var st status.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("GET /v1/status: %w", err)
	}
	return &st, nil
}

// queueIngest enqueues every movement from conns goroutines, one movement
// per call: the group commit without HTTP.
func queueIngest(ctx context.Context, q *queue.Queue, items []movement.Prepared, conns int) (ingestResult, error) {
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range conns {
		g.Go(func() error {
			for gctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(items) {
					return nil
				}
				if _, err := q.Enqueue(items[i : i+1]); err != nil {
					return err
				}
			}
			return gctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return ingestResult{}, err
	}
	el := time.Since(start)
	return ingestResult{n: len(items), elapsed: el, rate: rate(len(items), el)}, nil
}
