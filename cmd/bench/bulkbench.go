package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/daemon"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/settings"
)

const storeBulk = "S-BULK"

// rawBulkTx is how many movements the raw bulk baseline writes per
// transaction.
const rawBulkTx = 1000

// benchBulk compares `agent enqueue -f` of a file of NDJSON movements in
// random key order (the agent binary, built for the run, talking to a
// running agent over its control socket, as at a store) with raw bbolt
// writing the same records the queue writes for a pending movement,
// rawBulkTx movements per transaction. The file is split over the rounds;
// the two take turns, the order reversed every other round, and each
// writes its own file, which grows round by round.
func benchBulk(ctx context.Context, b *bench) error {
	const scn = "1b bulk"
	n, rounds := b.size.bulkN, b.size.bulkRounds
	dir, err := b.dir("bulk")
	if err != nil {
		return err
	}
	exe, err := buildAgent(ctx, filepath.Join(dir, "bin"))
	if err != nil {
		return err
	}
	// One NDJSON file per round, written before anything is timed.
	files := make([]string, rounds)
	for r := range rounds {
		files[r] = filepath.Join(dir, fmt.Sprintf("movements-%d.jsonl", r+1))
		if err := writeNDJSON(files[r], storeBulk, r*n/rounds, (r+1)*n/rounds, b.now); err != nil {
			return err
		}
	}

	dataDir := filepath.Join(dir, "agent")
	c := settings.Config{StoreID: storeBulk, DataDir: dataDir}
	c.Ingest.Listen = "off"
	o, err := c.Validate()
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := &agent{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		a.done <- daemon.Run(actx, o, nil, daemon.Hooks{Ready: func(string) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-a.done:
		return fmt.Errorf("the agent stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		a.stop()
		return fmt.Errorf("the agent was not ready within 30s")
	}
	defer a.stop()

	raw, err := openRawBulk(filepath.Join(dir, "raw.db"))
	if err != nil {
		return err
	}
	defer raw.Close()

	var enq, base ingestResult
	for r := range rounds {
		lo, hi := r*n/rounds, (r+1)*n/rounds
		doEnqueue := func() error {
			res, err := enqueueFile(ctx, exe, dataDir, files[r], hi-lo)
			if err != nil {
				return fmt.Errorf("agent enqueue -f, round %d: %w", r+1, err)
			}
			enq = enq.plus(res)
			b.logf("bulk: round %d/%d: agent enqueue -f: %s", r+1, rounds, res)
			return nil
		}
		doRaw := func() error {
			res, err := rawBulk(ctx, raw, storeBulk, lo, hi, b.now)
			if err != nil {
				return fmt.Errorf("raw bulk, round %d: %w", r+1, err)
			}
			base = base.plus(res)
			b.logf("bulk: round %d/%d: raw bbolt, %d a transaction: %s", r+1, rounds, rawBulkTx, res)
			return nil
		}
		steps := []func() error{doRaw, doEnqueue}
		if r%2 == 1 {
			steps = []func() error{doEnqueue, doRaw}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
	}
	ctl := control.Dial(control.Endpoint(dataDir))
	st, err := ctl.Status(ctx)
	ctl.CloseIdleConnections()
	if err != nil {
		return err
	}
	if st.Counts.Pending.Total != uint64(n) {
		return fmt.Errorf("the agent holds %d pending movements after enqueue -f of %d lines", st.Counts.Pending.Total, n)
	}
	if err := a.stop(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	b.reportAtSize(scn, "bulk_enqueue_vs_raw_bulk", n, func(name string, t *target) {
		b.rep.ratio(scn, name, fmt.Sprintf("`agent enqueue -f` (the agent binary, to a running agent over its control socket, chunks of %d lines) of %s NDJSON movements in random key order, in %d files taking turns: %s mov/s", enqueueChunkLines, thousands(float64(n)), rounds, thousands(enq.rate)),
			enq.rate/base.rate, fmt.Sprintf("raw bbolt writing the queue's records of a pending movement (pending, due and keys buckets), %d movements a transaction, the same movements in the same rounds: %s mov/s", rawBulkTx, thousands(base.rate)), t)
	}, atLeast(0.5))
	b.rep.value(scn, "bulk_enqueue_rate_"+sizeLabel(n), "`agent enqueue -f` rate", enq.rate, "mov/s", nil)
	b.rep.value(scn, "bulk_raw_rate_"+sizeLabel(n), fmt.Sprintf("raw bbolt bulk rate, %d a transaction", rawBulkTx), base.rate, "mov/s", nil)
	return nil
}

// buildAgent builds the agent binary into dir with the go command.
func buildAgent(ctx context.Context, dir string) (string, error) {
	name := "agent"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	exe := filepath.Join(dir, name)
	out, err := exec.CommandContext(ctx, "go", "build", "-o", exe, "github.com/rxedge/agent/cmd/agent").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the agent (the bench runs from the module, with the go command on PATH): %w: %s", err, bytes.TrimSpace(out))
	}
	return exe, nil
}

// writeNDJSON writes movements lo..hi-1 of store to path, one canonical
// movement a line.
func writeNDJSON(path, store string, lo, hi int, now time.Time) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := lo; i < hi; i++ {
		w.Write(generate(store, i, now).Payload)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// enqueueFile runs `agent enqueue -f file --json` against the agent of
// dataDir and times it from start to exit; every line must be accepted.
func enqueueFile(ctx context.Context, exe, dataDir, file string, lines int) (ingestResult, error) {
	cmd := exec.CommandContext(ctx, exe, "enqueue", "--data-dir", dataDir, "-f", file, "--json")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	el := time.Since(start)
	if err != nil {
		return ingestResult{}, fmt.Errorf("%w: %s", err, strings.TrimSpace(errb.String()))
	}
	var sum struct {
		Accepted int `json:"accepted"`
		Rejected int `json:"rejected"`
	}
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		return ingestResult{}, fmt.Errorf("reading its summary: %w: %s", err, out.Bytes())
	}
	if sum.Accepted != lines || sum.Rejected != 0 {
		return ingestResult{}, fmt.Errorf("%d lines accepted, %d rejected, want %d accepted", sum.Accepted, sum.Rejected, lines)
	}
	return ingestResult{n: lines, elapsed: el, rate: rate(lines, el)}, nil
}

// The raw bulk baseline's buckets, named as the queue's.
var (
	rawBucketMeta    = []byte("meta")
	rawBucketPending = []byte("pending")
	rawBucketDue     = []byte("due")
	rawBucketKeys    = []byte("keys")
)

func openRawBulk(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, n := range [][]byte{rawBucketMeta, rawBucketPending, rawBucketDue, rawBucketKeys} {
			if _, err := tx.CreateBucketIfNotExists(n); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// rawPut is one bbolt Put.
type rawPut struct {
	bucket     []byte
	key, value []byte
}

// pendingRecordPuts is what the queue writes for a new pending movement p
// given sequence seq at now (queue/enqueue.go store, the encodings of
// queue/record.go): its record in pending under the sequence, an entry
// in due under (now, seq), and its key entry, which the baseline puts in
// a bucket of one entry per key (the queue groups keys, queue/keyindex.go,
// which costs it more per key and fewer bytes). It is the one place
// the raw bulk baseline follows the queue's record layout: change it when
// that layout changes.
func pendingRecordPuts(p *movement.Prepared, seq uint64, now time.Time) [3]rawPut {
	ns := now.UnixNano()
	rec := make([]byte, 0, 96+len(p.Payload))
	rec = append(rec, 2) // a pending record; its sequence is the bucket key
	rec = append(rec, p.Key[:]...)
	rec = append(rec, p.Digest[:]...)
	rec = append(rec, byte(p.Class))
	rec = binary.AppendUvarint(rec, 0) // attempts
	rec = binary.AppendVarint(rec, ns) // enqueued at
	rec = binary.AppendVarint(rec, ns) // next attempt at
	rec = binary.AppendVarint(rec, 0)  // first failure
	rec = binary.AppendVarint(rec, 0)  // last failure
	rec = appendRawString(rec, p.Schedule)
	rec = appendRawString(rec, p.MovementID)
	rec = appendRawString(rec, "")     // last error kind
	rec = appendRawString(rec, "")     // last error text
	rec = binary.AppendUvarint(rec, 0) // delays
	rec = append(rec, 0)               // not quarantined
	rec = appendRawString(rec, string(p.Payload))

	due := make([]byte, 16)
	binary.BigEndian.PutUint64(due, uint64(ns))
	binary.BigEndian.PutUint64(due[8:], seq)

	key := binary.AppendUvarint([]byte{0x10}, seq) // a pending key: its sequence only

	return [3]rawPut{
		{rawBucketPending, binary.BigEndian.AppendUint64(nil, seq), rec},
		{rawBucketDue, due, nil},
		{rawBucketKeys, p.Key[:], key},
	}
}

func appendRawString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// rawBulk writes movements lo..hi-1 of store as pending records, rawBulkTx
// a transaction (each an Update: one commit and its fsyncs), and times the
// transactions only: the movements of each are generated before it.
func rawBulk(ctx context.Context, db *bolt.DB, store string, lo, hi int, now time.Time) (ingestResult, error) {
	var el time.Duration
	items := make([]movement.Prepared, 0, rawBulkTx)
	for from := lo; from < hi; from += rawBulkTx {
		if ctx.Err() != nil {
			return ingestResult{}, ctx.Err()
		}
		items = items[:0]
		for i := from; i < min(from+rawBulkTx, hi); i++ {
			items = append(items, generate(store, i, now))
		}
		t0 := time.Now()
		err := db.Update(func(tx *bolt.Tx) error {
			at := time.Now()
			for i := range items {
				for _, p := range pendingRecordPuts(&items[i], uint64(from+i+1), at) {
					if err := tx.Bucket(p.bucket).Put(p.key, p.value); err != nil {
						return err
					}
				}
			}
			return tx.Bucket(rawBucketMeta).Put([]byte("next_seq"), binary.BigEndian.AppendUint64(nil, uint64(from+len(items))))
		})
		el += time.Since(t0)
		if err != nil {
			return ingestResult{}, err
		}
	}
	return ingestResult{n: hi - lo, elapsed: el, rate: rate(hi-lo, el)}, nil
}
