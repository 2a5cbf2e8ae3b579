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

// buildChunk is the submission size used to build a backlog: large
// submissions make few, large commits.
const buildChunk = 50_000

// buildBacklog writes a data file for store holding n pending movements
// (0..n-1) at path, quickly: in submissions of buildChunk, in key order.
//
// Key order matters. Large commits of movements in arbitrary key order
// each rewrite most pages of the key index, and the file is left with as
// many free pages as the last commit rewrote (over 100 MiB for a million);
// bbolt writes its whole freelist on every commit, so every later commit
// pays for them. A store that accumulated its backlog commit by commit has
// few free pages. In key order each commit appends to the key index, and
// the file has almost none, like the store's.
func buildBacklog(path, store string, n int, now time.Time) error {
	type keyed struct {
		key [16]byte
		i   int
	}
	order := make([]keyed, n)
	for i := range order {
		order[i] = keyed{movement.Key(store, movementID(store, i)), i}
	}
	slices.SortFunc(order, func(a, b keyed) int { return bytes.Compare(a.key[:], b.key[:]) })
	q, err := queue.Open(queue.Options{Path: path, StoreID: store})
	if err != nil {
		return err
	}
	items := make([]movement.Prepared, 0, min(buildChunk, n))
	for from := 0; from < n; from += buildChunk {
		items = items[:0]
		for _, k := range order[from:min(from+buildChunk, n)] {
			items = append(items, generate(store, k.i, now))
		}
		if _, err := q.Enqueue(items); err != nil {
			q.Close()
			return fmt.Errorf("build backlog of %d: %w", n, err)
		}
	}
	return q.Close()
}

// backlog returns a copy, in dataDir, of a data file of store with n
// pending movements. The first call for a store and size builds the file;
// later calls copy it.
func (b *bench) backlog(store string, n int, dataDir string) (string, error) {
	id := fmt.Sprintf("%s-%d", store, n)
	src, ok := b.backlogs[id]
	if !ok {
		src = filepath.Join(b.root, "backlogs", id+".db")
		if err := os.MkdirAll(filepath.Dir(src), 0o750); err != nil {
			return "", err
		}
		t0 := time.Now()
		if err := buildBacklog(src, store, n, b.now); err != nil {
			return "", err
		}
		b.logf("built a backlog of %d movements in %s", n, time.Since(t0).Round(100*time.Millisecond))
		b.backlogs[id] = src
	}
	dst := settings.DataFile(dataDir)
	if err := copyFile(src, dst); err != nil {
		return "", err
	}
	return dst, nil
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
