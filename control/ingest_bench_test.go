package control

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// The ingest benchmarks post one movement per request from benchClients
// keep-alive clients to a loopback HTTP server: the agent's ingest
// handler, wired as the agent wires it (metrics, intake counter), over a
// real data file; and its baseline, a handler that only reads the body
// and puts it in a bbolt file with DB.Batch (MaxBatchSize benchClients).
// Both make every acknowledged request durable before answering.
const benchClients = 64

// benchMovements are n distinct movements of the store, 256 bytes each,
// as the store's software would send them.
func benchMovements(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		m := movement.Movement{
			MovementID: fmt.Sprintf("POS-%s-%09d", store, i),
			Type:       movement.TypeDispense,
			NDC:        "12345-6789-01",
			Quantity:   fmt.Sprint(1 + i%120),
			Unit:       "EA",
			OccurredAt: "2026-03-01T09:30:00-05:00",
			Lot:        fmt.Sprintf("L%07d", i),
			Expires:    "2028-06",
			RxRef:      fmt.Sprintf("RX%010d", i),
		}
		if i%5 == 0 {
			m.Schedule = "CII"
		}
		m.Note = strings.Repeat("n", 256-len(m.Canonical())-len(`,"note":""`))
		out[i] = m.Canonical()
	}
	return out
}

// benchServer is one side of the comparison: its server, and the number
// of transactions it has committed so far.
type benchServer struct {
	*httptest.Server
	commits func() uint64
}

// agentServer is the agent's ingest listener over a fresh data file.
func agentServer(b *testing.B) benchServer {
	b.Helper()
	q, err := queue.Open(queue.Options{Path: filepath.Join(b.TempDir(), "agent.db"), StoreID: store})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	s := New(Options{Queue: q, StoreID: store, Metrics: metrics.New(q), Counter: new(intake.Counter)})
	hs := httptest.NewUnstartedServer(s.IngestHandler())
	hs.Config.ReadHeaderTimeout, hs.Config.ReadTimeout = 10*time.Second, 30*time.Second
	hs.Start()
	b.Cleanup(hs.Close)
	return benchServer{hs, q.Commits}
}

// batchServer is the baseline: the raw body put with DB.Batch.
func batchServer(b *testing.B) benchServer {
	b.Helper()
	db, err := bolt.Open(filepath.Join(b.TempDir(), "batch.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.MaxBatchSize = benchClients
	bucket := []byte("movements")
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bucket); return err }); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Uint64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key := binary.BigEndian.AppendUint64(nil, seq.Add(1))
		if err := db.Batch(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(key, body) }); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	b.Cleanup(hs.Close)
	// A read transaction's ID is that of the last write committed.
	first := txID(b, db)
	return benchServer{hs, func() uint64 { return txID(b, db) - first }}
}

func txID(b *testing.B, db *bolt.DB) uint64 {
	var id int
	if err := db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }); err != nil {
		b.Fatal(err)
	}
	return uint64(id)
}

// postEach posts every body to hs from benchClients clients and returns
// the time it took, the CPU time the process used meanwhile (clients
// included) and each request's latency.
func postEach(b *testing.B, hs benchServer, bodies [][]byte) (time.Duration, time.Duration, []time.Duration) {
	b.Helper()
	tr := &http.Transport{MaxIdleConns: benchClients, MaxIdleConnsPerHost: benchClients, MaxConnsPerHost: benchClients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := hs.URL + IngestPath
	lat := make([]time.Duration, len(bodies))
	var next atomic.Int64
	var g errgroup.Group
	start, cpu := time.Now(), processCPU()
	for range benchClients {
		g.Go(func() error {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					return nil
				}
				t0 := time.Now()
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(bodies[i]))
				if err != nil {
					return err
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				answer, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					return fmt.Errorf("request %d: HTTP %d: %s", i, resp.StatusCode, answer)
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start), processCPU() - cpu, lat
}

// BenchmarkIngest measures each side alone, one movement per request, for
// profiling (-cpuprofile with -bench Ingest/agent).
func BenchmarkIngest(b *testing.B) {
	for _, side := range []struct {
		name  string
		serve func(*testing.B) benchServer
	}{{"agent", agentServer}, {"batch", batchServer}} {
		b.Run(side.name, func(b *testing.B) {
			hs := side.serve(b)
			bodies := benchMovements(b.N)
			b.ResetTimer()
			commits := hs.commits()
			el, cpu, _ := postEach(b, hs, bodies)
			b.ReportMetric(float64(b.N)/float64(max(hs.commits()-commits, 1)), "req/commit")
			b.ReportMetric(float64(b.N)/el.Seconds(), "req/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
		})
	}
}

// BenchmarkIngestVsBatch takes turns between the agent and the baseline,
// a slice of the movements each per round, and reports the agent's rate
// over the baseline's (agent/batch), the baseline's CPU time per request
// over the agent's (cpu-agent/batch: the rate ratio where the CPU, not
// the disk, is the limit) and the agent's p99 latency.
func BenchmarkIngestVsBatch(b *testing.B) {
	const rounds = 6
	agent, batch := agentServer(b), batchServer(b)
	n := max(b.N, 6*benchClients)
	bodies := benchMovements(n)
	var agentTime, batchTime, agentCPU, batchCPU time.Duration
	var lat []time.Duration
	agentCommits, batchCommits := agent.commits(), batch.commits()
	b.ResetTimer()
	for r := range rounds {
		part := bodies[r*n/rounds : (r+1)*n/rounds]
		sides := []func(){
			func() {
				el, cpu, l := postEach(b, agent, part)
				agentTime, agentCPU, lat = agentTime+el, agentCPU+cpu, append(lat, l...)
			},
			func() { el, cpu, _ := postEach(b, batch, part); batchTime, batchCPU = batchTime+el, batchCPU+cpu },
		}
		if r%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			side()
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(batchTime.Seconds()/agentTime.Seconds(), "agent/batch")
	if agentCPU > 0 {
		b.ReportMetric(batchCPU.Seconds()/agentCPU.Seconds(), "cpu-agent/batch")
		b.ReportMetric(float64(agentCPU.Microseconds())/float64(n), "agent-cpu-µs/req")
		b.ReportMetric(float64(batchCPU.Microseconds())/float64(n), "batch-cpu-µs/req")
	}
	b.ReportMetric(float64(n)/float64(max(agent.commits()-agentCommits, 1)), "agent-req/commit")
	b.ReportMetric(float64(n)/float64(max(batch.commits()-batchCommits, 1)), "batch-req/commit")
	b.ReportMetric(float64(n)/agentTime.Seconds(), "agent-req/s")
	b.ReportMetric(float64(n)/batchTime.Seconds(), "batch-req/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "agent-p99-ms")
}
