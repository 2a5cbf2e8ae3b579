package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"golang.org/x/mod/sumdb/note"
)

// drainLease is how many movements one drain step leases and settles: the
// size of the agent's atomic batches.
const drainLease = 1000

// benchCompact drains a backlog the way the sender's batches do (a lease
// of 1000, settled as synced in one transaction), closes the file and
// compacts it with queue.Compact. The file keeps a key record per synced
// movement, so it cannot shrink to nothing; what compaction returns is the
// space the drained payloads took.
func benchCompact(ctx context.Context, b *bench) error {
	const scn = "5 compact"
	n := b.size.compactN
	dir, err := b.dir("compact")
	if err != nil {
		return err
	}
	// The scale scenario's store: its backlog file is reused when built.
	path, err := b.backlog(storeScale, n, filepath.Join(dir, "agent"))
	if err != nil {
		return err
	}
	drained, err := drain(ctx, path, storeScale)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if drained.n != n {
		return fmt.Errorf("drained %d movements, want %d", drained.n, n)
	}
	b.logf("compact: drained %d movements in %s", drained.n, drained.elapsed.Round(time.Millisecond))
	before, err := fileSize(path)
	if err != nil {
		return err
	}
	// bbolt writes its whole freelist with every commit: what the drain
	// freed slows every commit until the file is compacted.
	extra := generateN(storeScale, n, 2*compactSteps, b.now)
	stepBefore, err := stepMedian(path, extra[:compactSteps])
	if err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := queue.Compact(path, queue.CompactOptions{}); err != nil {
		return err
	}
	took := time.Since(t0)
	after, err := fileSize(path)
	if err != nil {
		return err
	}
	stepAfter, err := stepMedian(path, extra[compactSteps:])
	if err != nil {
		return err
	}
	// The compacted file must still hold every synced key.
	q, err := queue.Open(queue.Options{Path: path, StoreID: storeScale, ReadOnly: true})
	if err != nil {
		return err
	}
	st, err := q.Stats()
	q.Close()
	if err != nil {
		return err
	}
	if want := uint64(n + 2*compactSteps); st.Count(queue.Synced) != want || st.Count(queue.Pending) != 0 {
		return fmt.Errorf("after compaction: %d synced, %d pending; want %d and 0", st.Count(queue.Synced), st.Count(queue.Pending), want)
	}
	b.logf("compact: %.1f MiB -> %.1f MiB in %s", mib(before), mib(after), took.Round(time.Millisecond))

	l := sizeLabel(n)
	b.rep.value(scn, "compact_shrink_ratio", fmt.Sprintf("size before / after queue.Compact of a file that held %s movements, all drained (%.1f MiB → %.1f MiB)", l, mib(before), mib(after)),
		float64(before)/float64(after), "", nil)
	b.rep.value(scn, "compact_before_mib", "file size after draining, before compaction", mib(before), "MiB", nil)
	b.rep.value(scn, "compact_after_mib", "file size after compaction", mib(after), "MiB", nil)
	b.rep.value(scn, "compact_s", "queue.Compact duration", took.Seconds(), "s", nil)
	b.rep.value(scn, "compact_step_before_ms", fmt.Sprintf("drained file, before compaction: one Enqueue + one Lease/MarkSynced (two commits), median of %d", compactSteps), ms(stepBefore), "ms", nil)
	b.rep.value(scn, "compact_step_after_ms", fmt.Sprintf("the same after compaction, median of %d", compactSteps), ms(stepAfter), "ms", nil)
	b.rep.value(scn, "compact_drain_rate", fmt.Sprintf("local drain (Lease %d + MarkSynced, one fsync per lease)", drainLease), drained.rate, "mov/s", nil)
	return nil
}

// drain marks every pending movement of the file at path synced, a lease
// at a time, as if central had acknowledged each batch.
func drain(ctx context.Context, path, store string) (syncResult, error) {
	q, err := queue.Open(queue.Options{Path: path, StoreID: store})
	if err != nil {
		return syncResult{}, err
	}
	defer q.Close()
	var n int
	var streamSeq uint64
	start := time.Now()
	for {
		if ctx.Err() != nil {
			return syncResult{}, ctx.Err()
		}
		recs, err := q.Lease(time.Now(), drainLease)
		if err != nil {
			return syncResult{}, err
		}
		if len(recs) == 0 {
			break
		}
		acks := make([]queue.Ack, len(recs))
		for i, r := range recs {
			streamSeq++
			acks[i] = queue.Ack{Seq: r.Seq, StreamSeq: streamSeq}
		}
		if err := q.Settle(queue.Settlement{Acks: acks}); err != nil {
			return syncResult{}, err
		}
		n += len(recs)
	}
	el := time.Since(start)
	if err := checkpointAsNotary(q, store); err != nil {
		return syncResult{}, err
	}
	return syncResult{n: n, elapsed: el, rate: rate(n, el)}, q.Close()
}

// checkpointAsNotary does what the agent's notary does within
// ledger.checkpoint_interval of a drain: it signs a checkpoint covering
// every movement and, as once central acknowledged its publication,
// records it published, which lets the file drop the leaf hashes it kept
// for the next consistency proof. (Not timed.)
func checkpointAsNotary(q *queue.Queue, store string) error {
	skey, _, err := ledger.GenerateKey(rand.Reader, store)
	if err != nil {
		return err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return err
	}
	c, err := q.SignCheckpoint(time.Now(), func(c ledger.Checkpoint) ([]byte, error) { return ledger.Sign(c, signer) })
	if errors.Is(err, queue.ErrNothingToSign) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return q.CheckpointPublished(c.ID)
}

// compactSteps is how many steps are timed before and after compaction.
const compactSteps = 51

// stepMedian opens the file at path and returns the median time of one
// step (see oneStep) for each of items.
func stepMedian(path string, items []movement.Prepared) (time.Duration, error) {
	q, err := queue.Open(queue.Options{Path: path, StoreID: storeScale})
	if err != nil {
		return 0, err
	}
	defer q.Close()
	var ds []time.Duration
	for i, p := range items {
		e, y, err := oneStep(q, p, uint64(i+1))
		if err != nil {
			return 0, err
		}
		ds = append(ds, e+y)
	}
	return quantile(ds, 0.5), q.Close()
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
