package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
)

// payloadSize is the size class of the generated movements: their
// canonical encoding is padded to this many bytes with a note.
const payloadSize = 256

var movementTypes = []string{
	movement.TypeDispense, movement.TypeReceive, movement.TypeDispense, movement.TypeReturn,
	movement.TypeDispense, movement.TypeAdjust, movement.TypeDispense, movement.TypeWaste,
	movement.TypeTransferIn, movement.TypeTransferOut,
}

// generate returns movement i of store in the form the queue stores: the
// same canonical payload, key and digest movement.Prepare gives for the
// payload (TestGeneratedMovementsAreValid checks that). It is built
// directly rather than through Prepare so that a million-movement backlog
// is quick to make. Every fifth movement is a Schedule II dispense.
func generate(store string, i int, now time.Time) movement.Prepared {
	m := movement.Movement{
		MovementID: movementID(store, i),
		StoreID:    store,
		Type:       movementTypes[i%len(movementTypes)],
		NDC:        fmt.Sprintf("%05d-%04d-%02d", 10000+i%89999, i%9999, i%99),
		Quantity:   fmt.Sprint(1 + i%120),
		Unit:       "EA",
		OccurredAt: now.UTC().Add(-time.Hour).Truncate(time.Second).Format(time.RFC3339),
		Lot:        fmt.Sprintf("L%07d", i%9_999_999),
		Expires:    "2028-06",
		RxRef:      fmt.Sprintf("RX%010d", i),
	}
	if i%5 == 0 {
		m.Type, m.Schedule = movement.TypeDispense, "CII"
	}
	c := m.Canonical()
	// `,"note":""` is 10 bytes.
	if pad := payloadSize - len(c) - 10; pad > 0 {
		note := make([]byte, pad)
		for j := range note {
			note[j] = 'a' + byte((i+j)%26)
		}
		m.Note = string(note)
		c = m.Canonical()
	}
	return movement.Prepared{
		MovementID: m.MovementID,
		Key:        movement.Key(store, m.MovementID),
		Digest:     movement.Digest(c),
		Class:      m.Class(),
		Schedule:   m.Schedule,
		Payload:    c,
	}
}

func movementID(store string, i int) string { return fmt.Sprintf("POS-%s-%09d", store, i) }

// generateN returns movements from..from+n-1 of store.
func generateN(store string, from, n int, now time.Time) []movement.Prepared {
	out := make([]movement.Prepared, n)
	for i := range out {
		out[i] = generate(store, from+i, now)
	}
	return out
}

// backlogOrder is the order a backlog is enqueued in.
type backlogOrder int

const (
	// orderRandom enqueues movements in the order of their movement ids,
	// so their keys (hashes) arrive in random order, as `agent enqueue`
	// and live intake write them, in submissions of enqueueChunkLines
	// (`agent enqueue`'s request size). Every drain figure uses it unless
	// its name says sorted.
	orderRandom backlogOrder = iota
	// orderSorted enqueues them in key order, in submissions of
	// sortedChunk: the order no store writes, kept as a second figure.
	orderSorted
)

func (o backlogOrder) String() string {
	if o == orderSorted {
		return "sorted"
	}
	return "random"
}

// sortedChunk is the submission size of a sorted backlog: large
// submissions make few, large commits, each appending to the key index.
const sortedChunk = 50_000

// buildBacklog writes a data file for store holding n pending movements
// (0..n-1) at path, in order.
//
// A random-order backlog is built the way `agent enqueue -f` builds one:
// submissions of enqueueChunkLines, each a commit that rewrites the pages
// of the key index its random keys fall in, leaving the free pages such
// commits leave. A sorted one is built in large submissions in key order:
// each commit appends to the key index, and the file has almost no free
// pages. (Large commits in random order would each rewrite most of the key
// index and leave the file with over 100 MiB of free pages for a million,
// which bbolt writes with every later commit: no store's file looks so.)
func buildBacklog(path, store string, n int, now time.Time, order backlogOrder) error {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	chunk := enqueueChunkLines
	if order == orderSorted {
		chunk = sortedChunk
		keys := make([][16]byte, n)
		for i := range keys {
			keys[i] = movement.Key(store, movementID(store, i))
		}
		slices.SortFunc(idx, func(a, b int) int { return bytes.Compare(keys[a][:], keys[b][:]) })
	}
	q, err := queue.Open(queue.Options{Path: path, StoreID: store})
	if err != nil {
		return err
	}
	items := make([]movement.Prepared, 0, min(chunk, n))
	for from := 0; from < n; from += chunk {
		items = items[:0]
		for _, i := range idx[from:min(from+chunk, n)] {
			items = append(items, generate(store, i, now))
		}
		if _, err := q.Enqueue(items); err != nil {
			q.Close()
			return fmt.Errorf("build backlog of %d: %w", n, err)
		}
	}
	return q.Close()
}

// backlog returns a copy, in dataDir, of a data file of store with n
// pending movements enqueued in random key order (see orderRandom).
func (b *bench) backlog(store string, n int, dataDir string) (string, error) {
	return b.backlogIn(store, n, orderRandom, dataDir)
}

// backlogIn returns a copy, in dataDir, of a data file of store with n
// pending movements enqueued in order. The first call for a store, size
// and order builds the file; later calls copy it.
func (b *bench) backlogIn(store string, n int, order backlogOrder, dataDir string) (string, error) {
	src, err := b.backlogFile(store, n, order)
	if err != nil {
		return "", err
	}
	dst := settings.DataFile(dataDir)
	if err := copyFile(src, dst); err != nil {
		return "", err
	}
	return dst, nil
}

// backlogFile is the built (cached) backlog file of store, n and order;
// callers must not change it.
func (b *bench) backlogFile(store string, n int, order backlogOrder) (string, error) {
	id := fmt.Sprintf("%s-%d-%s", store, n, order)
	if src, ok := b.backlogs[id]; ok {
		return src, nil
	}
	src := filepath.Join(b.root, "backlogs", id+".db")
	if err := os.MkdirAll(filepath.Dir(src), 0o750); err != nil {
		return "", err
	}
	t0 := time.Now()
	if err := buildBacklog(src, store, n, b.now, order); err != nil {
		return "", err
	}
	b.logf("built a backlog of %d movements in %s order in %s", n, order, time.Since(t0).Round(100*time.Millisecond))
	b.backlogs[id] = src
	return src, nil
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	// Synced, so that the agent's first commit on the copy does not pay
	// for writing it back.
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// agentOptions are the agent's validated options for store in dataDir,
// talking to servers (none: no sender).
func agentOptions(store, dataDir string, servers ...string) (settings.Options, error) {
	c := settings.Config{StoreID: store, DataDir: dataDir}
	c.NATS.Servers = servers
	c.Ingest.Listen = "off"
	return c.Validate()
}

// errTimeout is returned by waitFor when its condition did not hold in time.
var errTimeout = errors.New("timed out")

// waitFor polls cond every interval until it holds, fails, ctx ends or
// timeout passes.
func waitFor(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errTimeout
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
