package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
)

const storeLedger = "S-LEDGER"

// benchLedger measures what the store's log costs: in-process enqueue
// into a file that keeps the log against one that does not
// (queue.Options.NoLedger, the baseline), taking turns in rounds with
// the order changed every round; the data-file bytes the log adds per
// movement (its leaf hashes, held until a checkpoint is acknowledged:
// the most an offline store keeps); and signing a checkpoint of the whole
// backlog.
func benchLedger(ctx context.Context, b *bench) error {
	const scn = "9 ledger"
	s := b.size
	items := generateN(storeLedger, 0, s.ingestN, b.now)
	open := func(name string, off bool) (*queue.Queue, string, error) {
		dir, err := b.dir(name)
		if err != nil {
			return nil, "", err
		}
		path := settings.DataFile(dir)
		q, err := queue.Open(queue.Options{Path: path, StoreID: storeLedger, NoLedger: off})
		return q, path, err
	}
	with, withPath, err := open("ledger-on", false)
	if err != nil {
		return err
	}
	defer with.Close()
	without, withoutPath, err := open("ledger-off", true)
	if err != nil {
		return err
	}
	defer without.Close()

	var on, off ingestResult
	var ratios []float64
	rounds := s.ingestRounds
	for r := range rounds {
		lo, hi := r*len(items)/rounds, (r+1)*len(items)/rounds
		var ron, roff ingestResult
		doOn := func() (err error) { ron, err = queueIngest(ctx, with, items[lo:hi], s.ingestConns); return }
		doOff := func() (err error) { roff, err = queueIngest(ctx, without, items[lo:hi], s.ingestConns); return }
		steps := []func() error{doOff, doOn}
		if r%2 == 1 {
			steps = []func() error{doOn, doOff}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		on, off = on.plus(ron), off.plus(roff)
		ratios = append(ratios, ron.rate/roff.rate)
		b.logf("ledger: round %d/%d: with the log %s mov/s, without %s mov/s", r+1, rounds, thousands(ron.rate), thousands(roff.rate))
	}
	st, err := with.Ledger()
	if err != nil {
		return err
	}
	if st.Size != int64(len(items)) {
		return fmt.Errorf("the log holds %d leaves after %d movements", st.Size, len(items))
	}
	if err := with.CheckLog(); err != nil {
		return err
	}

	// Signing a checkpoint of the whole backlog: the proof reads every
	// leaf hash since the last acknowledged checkpoint.
	skey, _, err := ledger.GenerateKey(rand.Reader, storeLedger)
	if err != nil {
		return err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := with.SignCheckpoint(time.Now(), func(c ledger.Checkpoint) ([]byte, error) { return ledger.Sign(c, signer) }); err != nil {
		return err
	}
	signTime := time.Since(t0)

	with.Close()
	without.Close()
	fon, err := os.Stat(withPath)
	if err != nil {
		return err
	}
	foff, err := os.Stat(withoutPath)
	if err != nil {
		return err
	}
	leafBytes, err := ledgerInUse(withPath)
	if err != nil {
		return err
	}
	slices.Sort(ratios)
	base := fmt.Sprintf("the same in-process enqueue (%d goroutines, one movement per call) into a file without the log, %s movements in the same %d rounds: %s mov/s",
		s.ingestConns, thousands(float64(off.n)), rounds, thousands(off.rate))
	b.rep.ratio(scn, "ledger_ingest_ratio", "in-process enqueue with the store's log vs without", on.rate/off.rate, base, atLeast(0.9))
	b.rep.value(scn, "ledger_ingest_ratio_round_median", fmt.Sprintf("the same ratio round by round: median (min %.2f, max %.2f)", ratios[0], ratios[len(ratios)-1]),
		ratios[len(ratios)/2], "", nil)
	b.rep.value(scn, "ledger_bytes_per_movement", "bytes of the log's pages in use per movement, before any checkpoint is acknowledged (leaf hashes)",
		float64(leafBytes)/float64(len(items)), "B", nil)
	b.rep.value(scn, "ledger_file_bytes_per_movement", "data file size with the log minus without, per movement (bbolt grows its file in steps)",
		float64(fon.Size()-foff.Size())/float64(len(items)), "B", nil)
	b.rep.value(scn, "ledger_sign_ms", fmt.Sprintf("signing a checkpoint of %s movements with its consistency proof", thousands(float64(len(items)))), ms(signTime), "ms", nil)
	return nil
}

// ledgerInUse is the bytes of the pages the log's buckets use in the
// data file at path (the queue's bucket names, read with bbolt directly).
func ledgerInUse(path string) (int, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	n := 0
	err = db.View(func(tx *bolt.Tx) error {
		for _, name := range []string{"ledger", "ledger_leaves", "ledger_checkpoints"} {
			b := tx.Bucket([]byte(name))
			if b == nil {
				return fmt.Errorf("the data file has no bucket %s", name)
			}
			st := b.Stats()
			n += st.LeafInuse + st.BranchInuse + st.InlineBucketInuse
		}
		return nil
	})
	return n, err
}
