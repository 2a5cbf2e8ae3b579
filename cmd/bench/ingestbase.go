package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/movement"
)

// httpBatchMax is the HTTP batch baseline's bbolt MaxBatchSize.
const httpBatchMax = 64

// httpBatch is the HTTP ingest baseline: a trivial net/http handler that
// puts the raw request body under a counter with bbolt's DB.Batch and
// answers 202 once the batch holding it committed. It neither decodes nor
// checks anything: it is what the disk and HTTP allow.
type httpBatch struct {
	db   *bolt.DB
	srv  *http.Server
	addr string
	seq  atomic.Uint64
	done chan error
}

func startHTTPBatch(path string) (*httpBatch, error) {
	db, err := openNaive(path)
	if err != nil {
		return nil, err
	}
	db.MaxBatchSize = httpBatchMax
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		db.Close()
		return nil, err
	}
	h := &httpBatch{db: db, addr: ln.Addr().String(), done: make(chan error, 1)}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { h.done <- h.srv.Serve(ln) }()
	return h, nil
}

func (h *httpBatch) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	key := binary.BigEndian.AppendUint64(nil, h.seq.Add(1))
	if err := h.db.Batch(func(tx *bolt.Tx) error {
		return tx.Bucket(naiveBucket).Put(key, body)
	}); err != nil {
		http.Error(w, "store", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// count is how many bodies the baseline holds.
func (h *httpBatch) count() (int, error) {
	var n int
	err := h.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(naiveBucket).Stats().KeyN
		return nil
	})
	return n, err
}

func (h *httpBatch) close() error {
	err := h.srv.Close()
	if serr := <-h.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if cerr := h.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// decodeCost measures movement.Decode of a realistic movement (a
// generated one: every field, a Schedule II dispense, 256 bytes), and as
// the same run's reference json.Unmarshal of it into the struct, with
// testing.Benchmark.
func (b *bench) decodeCost(scn string) error {
	payload := generate(storeIngest, 5, b.now).Payload
	if _, es := movement.Decode(payload); es != nil {
		return fmt.Errorf("movement.Decode of the benchmark movement: %v", es)
	}
	var failed error
	dec := testing.Benchmark(func(tb *testing.B) {
		tb.ReportAllocs()
		for tb.Loop() {
			if _, es := movement.Decode(payload); es != nil {
				failed = es
			}
		}
	})
	ref := testing.Benchmark(func(tb *testing.B) {
		tb.ReportAllocs()
		for tb.Loop() {
			var m movement.Movement
			if err := json.Unmarshal(payload, &m); err != nil {
				failed = err
			}
		}
	})
	if failed != nil {
		return fmt.Errorf("decoding the benchmark movement: %w", failed)
	}
	if dec.N == 0 || ref.N == 0 {
		return errors.New("testing.Benchmark ran no iteration")
	}
	refNs, refAllocs := float64(ref.NsPerOp()), float64(ref.AllocsPerOp())
	b.logf("ingest: movement.Decode %d ns, %d allocs; json.Unmarshal %d ns, %d allocs", dec.NsPerOp(), dec.AllocsPerOp(), ref.NsPerOp(), ref.AllocsPerOp())
	what := fmt.Sprintf("movement.Decode of a %d-byte movement with every field (testing.Benchmark, %d iterations)", len(payload), dec.N)
	b.rep.value(scn, "decode_ns", what+fmt.Sprintf("; json.Unmarshal into the struct: %.0f ns", refNs), float64(dec.NsPerOp()), "ns", atMost(5000))
	b.rep.value(scn, "decode_allocs", fmt.Sprintf("allocations of the same; json.Unmarshal: %.0f", refAllocs), float64(dec.AllocsPerOp()), "", atMost(30))
	b.rep.ratio(scn, "decode_vs_unmarshal", "movement.Decode time vs json.Unmarshal of the same movement into the struct",
		float64(dec.NsPerOp())/refNs, fmt.Sprintf("json.Unmarshal: %.0f ns, %.0f allocations", refNs, refAllocs), nil)
	return nil
}
