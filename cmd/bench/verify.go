package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
)

// EnvVerifyN sets the verify scenario's archive size (movements); the
// defaults are 1,000,000 (100,000 with -quick). 10000000 is the size the
// figure of record uses: about 6 GB of disk and some minutes.
const EnvVerifyN = "RXBENCH_VERIFY_N"

// verifyStores and verifyEvery shape the archive: stores, each signing a
// checkpoint every verifyEvery of its movements.
const (
	verifyStores = 100
	verifyEvery  = 500
)

// verifyStore is a store of the bench's archive.
type verifyStore struct {
	id     string
	log    string
	signer note.Signer
	vkey   string
	tree   ledger.Frontier
	prev   ledger.Frontier
	added  []ledger.Hash
}

func benchVerify(ctx context.Context, b *bench) error {
	const sc = "9 verify"
	n := 1_000_000
	if b.size.quick {
		n = 100_000
	}
	if v := os.Getenv(EnvVerifyN); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 4*verifyStores {
			return fmt.Errorf("%s=%q is not a size (at least %d)", EnvVerifyN, v, 4*verifyStores)
		}
		n = k
	}
	dir, err := b.dir("verify")
	if err != nil {
		return err
	}
	vh := &verifyHub{ctx: ctx, dir: dir}
	if err := vh.start(); err != nil {
		return err
	}
	defer vh.close()
	js := vh.js
	// The fresh archive first: a full verification of as many records as
	// an incremental pass reads is the incremental figure's baseline. It
	// takes the archive subjects while it is filled, then lets go of them
	// for the big archive (what it holds keeps its subjects).
	var roster strings.Builder
	fresh, err := newVerifyStores("F", &roster)
	if err != nil {
		return err
	}
	stores, err := newVerifyStores("V", &roster)
	if err != nil {
		return err
	}
	r, err := provision.ParseRoster(strings.NewReader(roster.String()))
	if err != nil {
		return err
	}
	nNew := incrementalNew(b.size.quick)
	if err := b.fillFresh(ctx, js, fresh, nNew); err != nil {
		return err
	}
	// The archive as central's sourcing leaves it: one subject per store,
	// the agent's headers, the canonical payload, checkpoints among them.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: central.ArchiveStreamName,
		Subjects: []string{central.ArchivePrefix + ">"}, Storage: jetstream.FileStorage}); err != nil {
		return err
	}
	// Two sizes, a quarter and the whole, to see whether verify's memory
	// grows with the archive; at each, raw reads and verifies take turns.
	small := n / 4
	var at [2]verifyRun
	if err := b.fillVerify(ctx, js, stores, 0, small); err != nil {
		return err
	}
	if err := vh.restart(); err != nil {
		return err
	}
	// Three rounds each, the fastest kept: the machines it runs on are
	// busy, and a quick run's reads take a tenth of a second.
	rounds := 3
	if at[0], err = b.measureVerify(ctx, vh.nc, r, rounds, nil); err != nil {
		return err
	}
	if err := b.fillVerify(ctx, vh.js, stores, small, n); err != nil {
		return err
	}
	if err := vh.restart(); err != nil {
		return err
	}
	// The full verification at the whole size keeps its state, as `verify
	// --state` does on its first pass: the incremental pass starts there.
	state := &audit.MemState{}
	if at[1], err = b.measureVerify(ctx, vh.nc, r, rounds, state); err != nil {
		return err
	}
	full := at[1]
	rate := float64(full.records) / full.verifySecs
	b.rep.ratio(sc, "verify_vs_raw_read", fmt.Sprintf("verify records/s over an archive of %d movements of %d stores (a checkpoint every %d) against one raw ordered read of the same archive with payloads; verify reads it once, and keeps its state",
		n, verifyStores, verifyEvery), rate/(float64(full.records)/full.rawSecs), fmt.Sprintf("raw read %.0f records/s; verify %.0f records/s", float64(full.records)/full.rawSecs, rate), atLeast(0.8))
	if err := b.measureIncremental(ctx, vh, stores, r, state, n, nNew); err != nil {
		return err
	}
	b.rep.value(sc, "verify_records_per_s", "verify records/s (both reads, the trees, every payload's digest, every checkpoint's signature and proof)", rate, "/s", nil)
	b.rep.value(sc, "verify_1_6b_hours", fmt.Sprintf("verify of 1.6 billion records at that rate, extrapolated linearly (%s; nats-server in a process of its own on the same machine)", environment()), backfillRecords/rate/3600, "h", nil)
	extra := func(v verifyRun) float64 { return mibU(v.verifyHeap) - mibU(v.rawHeap) }
	b.rep.value(sc, "verify_heap_peak_mib", fmt.Sprintf("verify's heap peak above the raw read's, the bench process (nats-server runs in its own), the lower of three rounds each (MiB; the raw read's: %.1f)", mibU(full.rawHeap)), extra(full), "MiB", nil)
	b.rep.value(sc, "verify_heap_peak_quarter_mib", fmt.Sprintf("the same at %d movements, a quarter of the archive (MiB): equal figures mean memory does not grow with the archive", small), extra(at[0]), "MiB", nil)
	if full.rss > 0 {
		b.rep.value(sc, "verify_rss_peak_mib", "the bench process's resident set peak during verify (nats-server runs in its own; MiB)", mibU(full.rss), "MiB", nil)
	}
	if n < 10_000_000 {
		b.rep.note(fmt.Sprintf("verify: measured over %d movements (set %s=10000000 for the figure of record); the 1.6-billion figure extrapolates from that size", n, EnvVerifyN))
	}
	return nil
}

// verifyHub is the bench's server, in a process of its own (so that the
// heap and resident set measured are the readers' alone), and a
// connection to it. It is restarted after each fill.
type verifyHub struct {
	ctx context.Context
	dir string
	p   *serverProc
	nc  *nats.Conn
	js  jetstream.JetStream
}

func (v *verifyHub) start() error {
	p, err := startServerProc(v.ctx, v.dir, true)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(p.url())
	if err != nil {
		p.kill()
		return err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		nc.Close()
		p.kill()
		return err
	}
	v.p, v.nc, v.js = p, nc, js
	return nil
}

func (v *verifyHub) close() error {
	if v.p == nil {
		return nil
	}
	v.nc.Close()
	err := v.p.stop()
	v.p = nil
	return err
}

func (v *verifyHub) restart() error {
	if err := v.close(); err != nil {
		return err
	}
	runtime.GC()
	return v.start()
}

// fillVerify archives the movements lo..hi-1, spread over the stores in
// turn, and each store's checkpoint every verifyEvery of its movements.
func (b *bench) fillVerify(ctx context.Context, js jetstream.JetStream, stores []*verifyStore, lo, hi int) error {
	b.logf("verify: archiving movements %d-%d", lo, hi-1)
	now := b.now
	for i := lo; i < hi; i++ {
		s := stores[i%len(stores)]
		seq := uint64(i/len(stores) + 1)
		p := generate(s.id, int(seq), now)
		var l ledger.Leaf
		l.Seq, l.Key, l.Digest = seq, p.Key, p.Digest
		s.tree.Append(l.Hash())
		s.added = append(s.added, l.Hash())
		m := central.Message{Store: s.id, Key: hex.EncodeToString(p.Key[:]), Digest: hex.EncodeToString(p.Digest[:]), Seq: seq,
			Schedule: p.Schedule, EnqueuedAt: now, Payload: p.Payload}
		msg := m.Msg()
		msg.Subject = central.ArchiveSubject(s.id)
		msg.Header.Del(central.HeaderExpectLast)
		if _, err := js.PublishMsgAsync(msg); err != nil {
			return err
		}
		if len(s.added) == verifyEvery || i >= hi-len(stores) {
			if err := s.checkpoint(js, now); err != nil {
				return err
			}
		}
		if i%4096 == 4095 {
			if err := awaitAsync(js); err != nil {
				return err
			}
		}
	}
	return awaitAsync(js)
}

func awaitAsync(js jetstream.JetStream) error {
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-time.After(time.Minute):
		return errors.New("verify: archiving timed out")
	}
}

func (s *verifyStore) checkpoint(js jetstream.JetStream, now time.Time) error {
	if len(s.added) == 0 {
		return nil
	}
	c := ledger.Checkpoint{Store: s.id, Log: s.log, Size: s.tree.Size, Root: s.tree.Root(), First: 1, Time: now.Add(-time.Hour).UTC()}
	proof, err := ledger.ProveConsistency(s.prev, s.added)
	if err != nil {
		return err
	}
	signed, err := ledger.Sign(c, s.signer)
	if err != nil {
		return err
	}
	body, err := ledger.Message{Note: string(signed), PrevSize: s.prev.Size, Proof: proof}.Marshal()
	if err != nil {
		return err
	}
	tok := ledger.CheckpointToken(s.log, c.Size)
	msg := nats.NewMsg(central.ArchiveSubject(s.id))
	msg.Header.Set(central.HeaderMsgID, tok)
	msg.Header.Set(central.HeaderStore, s.id)
	msg.Data = body
	if _, err := js.PublishMsgAsync(msg); err != nil {
		return err
	}
	s.prev, s.added = s.tree.Clone(), s.added[:0]
	return nil
}

// verifyRun is one size's measurement.
type verifyRun struct {
	records             uint64
	rawSecs, verifySecs float64
	rawHeap, verifyHeap uint64
	rss                 uint64
}

// measureVerify takes turns: a raw read, then verify, rounds times,
// keeping the fastest of each and the lowest heap peak of each.
func (b *bench) measureVerify(ctx context.Context, nc *nats.Conn, r *provision.Roster, rounds int, state audit.StateStore) (verifyRun, error) {
	var out verifyRun
	for round := 0; round < rounds; round++ {
		runtime.GC()
		stop := sampleMemory()
		t0 := time.Now()
		n, err := rawRead(ctx, nc)
		secs := time.Since(t0).Seconds()
		heap, _ := stop()
		if err != nil {
			return out, err
		}
		if out.rawSecs == 0 || secs < out.rawSecs {
			out.rawSecs = secs
		}
		if out.rawHeap == 0 || heap < out.rawHeap {
			out.rawHeap = heap
		}
		b.logf("verify: raw read of %d records in %.1fs (%.0f/s), heap peak %.1f MiB", n, secs, float64(n)/secs, mibU(heap))

		runtime.GC()
		stop = sampleMemory()
		t0 = time.Now()
		o := audit.Options{Conn: nc, Roster: r, Archives: []string{central.ArchiveStreamName}}
		if state != nil {
			// Each round a first pass: the state of the last is kept.
			o.State, o.RecheckBudget = &audit.MemState{}, -1
		}
		rep, err := audit.Verify(ctx, o)
		secs = time.Since(t0).Seconds()
		heap, rss := stop()
		if err != nil {
			return out, err
		}
		if !rep.OK() || rep.Records != n {
			return out, fmt.Errorf("verify found %v over %d records (raw read %d): the bench's archive should hold", rep.Counts, rep.Records, n)
		}
		if out.verifySecs == 0 || secs < out.verifySecs {
			out.verifySecs = secs
		}
		if out.verifyHeap == 0 || heap < out.verifyHeap {
			out.verifyHeap = heap
		}
		out.rss, out.records = max(out.rss, rss), n
		b.logf("verify: verified %d records in %.1fs (%.0f/s), heap peak %.1f MiB", n, secs, float64(n)/secs, mibU(heap))
		if state != nil {
			saved, err := o.State.Load(ctx)
			if err != nil {
				return out, err
			}
			if err := state.Save(ctx, saved); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// rawRead reads the archive once, in order, with payloads, and counts.
func rawRead(ctx context.Context, nc *nats.Conn) (uint64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	st, err := js.Stream(ctx, central.ArchiveStreamName)
	if err != nil {
		return 0, err
	}
	last := st.CachedInfo().State.LastSeq
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	var n uint64
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return n, err
		}
		meta, err := m.Metadata()
		if err != nil {
			return n, err
		}
		n++
		if meta.Sequence.Stream >= last {
			return n, nil
		}
	}
}

// sampleMemory samples the heap in use (and on Linux the resident set)
// every 50 ms until the returned function is called, which gives the
// peaks.
func sampleMemory() func() (heap, rss uint64) {
	var mu sync.Mutex
	var peakHeap, peakRSS uint64
	done := make(chan struct{})
	stopped := make(chan struct{})
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		r := rssBytes()
		mu.Lock()
		peakHeap, peakRSS = max(peakHeap, ms.HeapInuse), max(peakRSS, r)
		mu.Unlock()
	}
	go func() {
		defer close(stopped)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			sample()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, uint64) {
		close(done)
		<-stopped
		sample()
		mu.Lock()
		defer mu.Unlock()
		return peakHeap, peakRSS
	}
}

// rssBytes is the process's resident set (Linux; 0 elsewhere).
func rssBytes() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mibU(n uint64) float64 { return float64(n) / (1 << 20) }
