package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	stdsync "sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/central"
)

// The central scenario measures central's layouts in a server process of
// its own (centralproc.go):
//
//   - memory per retained key, the old layout (every key in one movement
//     stream, 90 days) against the new (every movement in the archive,
//     only the dedupe horizon's share in the movement stream), after a
//     clean restart, and the estimate for a chain that follows from it;
//   - the time a server takes to come back after SIGKILL with either;
//   - the RSS that digest checks (direct gets) of old and of recent keys
//     add;
//   - the store rate of single publishes with 1 and with 4 partitions.
const scnCentral = "6 central"

// centralStores is how many stores the filled movements are spread over.
const centralStores = 200

// Chain the estimate is made for: records over two years, on a
// three-node cluster of R3 streams (every node holds every replica).
const (
	chainRecords     = 1.6e9
	chainRecordsDays = 730
	chainNodes       = 3
)

// fillDupWindow is the duplicate window of the filled streams. The server
// rebuilds the duplicate map from the messages inside the window when it
// starts, so with the production window of 10 minutes every movement of
// a fill minutes long would sit in that map at the restart, which no
// steady state sees. The fill uses a short window and waits it out.
const fillDupWindow = 2 * time.Second

// defaultFillAge is the movement stream's max_age while the new layout is
// filled (sizes.fillAge): the archive keeps every movement while the
// movement stream forgets them seconds later, as it forgets them after
// the horizon.
const defaultFillAge = 20 * time.Second

// oldMaxAge is the movement stream's max_age of the old layout.
const oldMaxAge = 90 * 24 * time.Hour

// fillBatch is the atomic batch size of a fill (the server's default
// limit); fillWorkers batches are in flight at once.
const (
	fillBatch   = 1000
	fillWorkers = 4
	// fillChunk movements are published before the archive's lag is
	// checked; the fill waits while it is above fillMaxLag.
	fillChunk  = 50_000
	fillMaxLag = 100_000
)

// centralStore names store s of the fill.
func centralStore(s int) string { return fmt.Sprintf("C%04d", s) }

// fillMsg is movement i of a fill: store i%centralStores, its movement
// i/centralStores, with a real key, digest, headers and payload.
func fillMsg(i int, now time.Time) (*nats.Msg, string, string) {
	store := centralStore(i % centralStores)
	n := i / centralStores
	p := generate(store, n, now)
	key := p.KeyString()
	msg := central.Message{
		Store: store, Key: key, Digest: hex.EncodeToString(p.Digest[:]),
		Seq: uint64(n + 1), Schedule: p.Schedule, EnqueuedAt: now, Payload: p.Payload,
	}.Msg()
	return msg, store, key
}

// msgBytes is the size of a message on the wire, subject, headers and
// payload, roughly what a stream stores for it.
func msgBytes(m *nats.Msg) int {
	n := len(m.Subject) + len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n + 12
}

func benchCentral(ctx context.Context, b *bench) error {
	if runtime.GOOS != "linux" {
		b.rep.note("central: not run on " + runtime.GOOS + ": it reads the server's memory and CPU from /proc and kills it with SIGKILL.")
		return nil
	}
	b.rep.note("central sizes: " + centralSizeNote(b.size) + ".")
	if err := b.centralLayouts(ctx); err != nil {
		return err
	}
	return b.centralPartitions(ctx)
}

// layoutResult is what one layout measured.
type layoutResult struct {
	old        bool
	n          int
	fill       time.Duration
	killUp     time.Duration // SIGKILL restart: start to every stream answering
	killStart  float64       // of which hub.Start, in the child
	cleanUp    time.Duration // clean restart, the same
	full       memPoint      // after the clean restart
	mid        memPoint      // after a clean restart half way
	midN       int           // movements stored half way
	midTime    time.Duration // spent on the measurement half way
	movMsgs    uint64        // messages in the movement stream at measurement
	archMsgs   uint64
	diskBytes  uint64 // bytes the streams hold
	recentGrow float64
	randomGrow float64
}

func (r layoutResult) name() string {
	if r.old {
		return "old"
	}
	return "new"
}

// centralLayouts fills a server with the old layout and one with the new,
// at the same count, and measures both.
func (b *bench) centralLayouts(ctx context.Context) error {
	n := b.size.centralKeys
	l := sizeLabel(n)
	if err := b.checkDisk(n); err != nil {
		return err
	}

	// An empty server, the base every per-key figure is taken over.
	dir, err := b.dir("central-empty")
	if err != nil {
		return err
	}
	empty, err := startServerProc(ctx, filepath.Join(dir, "js"), true)
	if err != nil {
		return err
	}
	if err := func() error {
		nc, js, err := connectJS(empty.url())
		if err != nil {
			return err
		}
		defer nc.Close()
		_, err = js.CreateStream(ctx, central.StreamConfig(central.StreamOptions{MaxAge: oldMaxAge, DuplicateWindow: fillDupWindow}))
		return err
	}(); err != nil {
		empty.kill()
		return err
	}
	if err := empty.stop(); err != nil {
		return err
	}
	empty, err = startServerProc(ctx, filepath.Join(dir, "js"), true)
	if err != nil {
		return err
	}
	time.Sleep(b.size.cacheSettle)
	baseRSS, err := empty.rss()
	if err != nil {
		empty.kill()
		return err
	}
	baseMem, err := empty.mem()
	if err != nil {
		empty.kill()
		return err
	}
	if err := empty.stop(); err != nil {
		return err
	}
	os.RemoveAll(dir)
	b.logf("central: empty server (one empty stream): RSS %.1f MiB, heap %.1f MiB", baseRSS/(1<<20), float64(baseMem.HeapAlloc)/(1<<20))

	var res [2]layoutResult
	for i, old := range []bool{true, false} {
		r, err := b.centralLayout(ctx, n, old)
		if err != nil {
			return fmt.Errorf("%s layout: %w", map[bool]string{true: "old", false: "new"}[old], err)
		}
		res[i] = r
	}
	o, nw := res[0], res[1]

	perKey := func(r layoutResult) float64 { return r.full.rss / float64(r.n) }
	marg := func(r layoutResult) float64 { return (r.full.rss - baseRSS) / float64(r.n) }
	heapOf := func(m memPoint) float64 { return float64(m.heap.HeapAlloc) }
	sample := fmt.Sprintf("%s movements over %d stores, %d-byte payload (%d bytes a message with subject and headers), filled by atomic batches of %d, %d in flight, server without sync_interval always; duplicate window %s (waited out) so that the restart does not rebuild a duplicate map of the whole fill; memory read %s after a clean restart (the server drops a block's cache 10 s after its last use)",
		thousands(float64(n)), centralStores, payloadSize, b.centralMsgBytes, fillBatch, fillWorkers, fillDupWindow, b.size.cacheSettle)
	b.rep.note("central layouts: " + sample + fmt.Sprintf(". Empty server (one empty stream): VmRSS %.1f MiB, heap %.1f MiB; every `_marginal` figure is over it.", baseRSS/(1<<20), heapOf(memPoint{heap: baseMem})/(1<<20)))
	for _, r := range res {
		desc := fmt.Sprintf("old layout: %s keys in one movement stream (max_age 90 d)", thousands(float64(r.n)))
		if !r.old {
			desc = fmt.Sprintf("new layout: %s movements in the archive (761 d), %s keys (%.2f%%) still in the movement stream (horizon 35 d)",
				thousands(float64(r.archMsgs)), thousands(float64(r.movMsgs)), 100*float64(r.movMsgs)/float64(r.n))
		}
		b.rep.value(scnCentral, "central_rss_bytes_per_key_"+r.name()+"_"+l,
			fmt.Sprintf("%s: server VmRSS after a clean restart (%.1f MiB) / retained keys", desc, r.full.rss/(1<<20)), perKey(r), "B", nil)
		b.rep.value(scnCentral, "central_rss_bytes_per_key_"+r.name()+"_marginal_"+l,
			fmt.Sprintf("%s layout: (VmRSS − empty server's) / retained keys", r.name()), marg(r), "B", nil)
		b.rep.value(scnCentral, "central_heap_bytes_per_key_"+r.name()+"_slope_"+l,
			fmt.Sprintf("%s layout: heap after GC, %s stored (%.1f MiB) − half way, %s (%.1f MiB), per movement", r.name(), thousands(float64(r.n)), heapOf(r.full)/(1<<20), thousands(float64(r.midN)), heapOf(r.mid)/(1<<20)),
			(heapOf(r.full)-heapOf(r.mid))/float64(r.n-r.midN), "B", nil)
		b.rep.value(scnCentral, "central_restart_after_kill_seconds_"+r.name()+"_"+l,
			fmt.Sprintf("%s layout, %s retained: SIGKILL, then start to every stream's info and a direct get answering (of which the server's start %.2f s); a clean restart takes %.2f s",
				r.name(), l, r.killStart, r.cleanUp.Seconds()), r.killUp.Seconds(), "s", nil)
		b.rep.value(scnCentral, "central_fill_rate_"+r.name()+"_"+l, fmt.Sprintf("%s layout: fill rate (stored in every stream of the layout; the new layout's waits for the movement stream to forget count)", r.name()), rate(r.n, r.fill), "msg/s", nil)
		b.rep.value(scnCentral, "central_disk_bytes_per_record_"+r.name()+"_"+l, fmt.Sprintf("%s layout: stream bytes / retained movements", r.name()), float64(r.diskBytes)/float64(r.n), "B", nil)
	}
	b.rep.ratio(scnCentral, "central_rss_per_key_old_vs_new_"+l, "server VmRSS per retained key, old layout vs new",
		perKey(o)/perKey(nw), fmt.Sprintf("new layout: %.1f B/key", perKey(nw)), nil)
	b.rep.ratio(scnCentral, "central_rss_marginal_old_vs_new_"+l, "server VmRSS above the empty server's, old layout vs new",
		marg(o)/marg(nw), fmt.Sprintf("new layout: %.1f MiB above it", (nw.full.rss-baseRSS)/(1<<20)), nil)
	gets := b.size.digestGets
	b.rep.value(scnCentral, "central_digest_check_rss_growth_bytes_random",
		fmt.Sprintf("old layout, %s keys: VmRSS growth over %d direct gets of random keys, on a server restarted and settled", l, gets), o.randomGrow, "B", nil)
	b.rep.value(scnCentral, "central_digest_check_rss_growth_bytes_recent",
		fmt.Sprintf("old layout, %s keys: VmRSS growth over %d direct gets of the last %d keys stored, on a server restarted and settled", l, gets, recentKeys), o.recentGrow, "B", nil)
	b.rep.value(scnCentral, "central_digest_check_rss_growth_bytes_new_random",
		fmt.Sprintf("new layout: VmRSS growth over %d direct gets of random keys still in the movement stream", gets), nw.randomGrow, "B", nil)
	b.rep.value(scnCentral, "central_digest_check_rss_growth_bytes_new_recent",
		fmt.Sprintf("new layout: VmRSS growth over %d direct gets of the last %d keys stored", gets, recentKeys), nw.recentGrow, "B", nil)

	// The estimate. A chain's movement streams hold the horizon's keys,
	// its archives every record of the retention; each node of an R3
	// cluster holds every replica. Bytes per key: the old layout's VmRSS
	// from half way to full, per key (fixed costs, such as the caches of
	// the blocks last written, cancel out). Bytes per archived record: the
	// new layout's heap from half way to full, less the keys the movement
	// stream gained, per record: too small for VmRSS to resolve.
	keyB := marg(o)
	keySlope := (o.full.rss - o.mid.rss) / float64(o.n-o.midN)
	keyHeap := (heapOf(o.full) - heapOf(o.mid)) / float64(o.n-o.midN)
	archB := (heapOf(nw.full) - heapOf(nw.mid) - float64(nw.movMsgs)*keyHeap) / float64(int(nw.archMsgs)-nw.midN)
	archRSS := (nw.full.rss - baseRSS - float64(nw.movMsgs)*keyB) / float64(nw.archMsgs)
	archNote := fmt.Sprintf("; by VmRSS, (new layout − empty server − its movement stream's keys × %.1f B) / records = %.2f B", keyB, archRSS)
	if archB < 0 {
		archNote += fmt.Sprintf("; measured %.3f B, within the noise: taken as 0", archB)
		archB = 0
	}
	horizonDays := central.DefaultHorizon.Hours() / 24
	retentionDays := central.DefaultRetention.Hours() / 24
	horizonKeys := chainRecords * horizonDays / chainRecordsDays
	archRecords := chainRecords * retentionDays / chainRecordsDays
	est := horizonKeys*keyB + archRecords*archB + baseRSS
	oldKeys := chainRecords * oldMaxAge.Hours() / 24 / chainRecordsDays
	oldEst := oldKeys*keyB + baseRSS
	allKeys := chainRecords*keyB + baseRSS
	b.rep.value(scnCentral, "central_bytes_per_key_slope_"+l, fmt.Sprintf("old layout: VmRSS from %s to %s keys, per key (heap after GC: %.1f B)", thousands(float64(o.midN)), thousands(float64(o.n)), keyHeap), keySlope, "B", nil)
	b.rep.value(scnCentral, "central_archive_bytes_per_record_slope_"+l, fmt.Sprintf("new layout: heap after GC from %s to %s archived, less the movement stream's %s keys × %.1f B, per record (VmRSS cannot resolve it)%s", thousands(float64(nw.midN)), thousands(float64(nw.archMsgs)), thousands(float64(nw.movMsgs)), keyHeap, archNote), archB, "B", nil)
	small := ""
	if n < million {
		small = fmt.Sprintf("at %s keys, fixed costs (the caches of the blocks last written) swamp the archive's cost per record: the estimate needs 1m keys or more; ", thousands(float64(n)))
	}
	b.rep.value(scnCentral, "central_ram_per_node_bytes_1_6b_estimate",
		small+fmt.Sprintf("estimate, 1.6e9 records over 2 years, %d-node R3 cluster (every node holds every replica): %.3g keys inside the 35 d horizon × %.1f B/key (old layout, VmRSS above the empty server's, per key) + %.3g archived records (761 d) × %.3f B/record + the empty server's %.0f MiB = %.1f GiB; the old layout (90 d of keys) would need %.1f GiB, and one subject per key for two years %.1f GiB",
			chainNodes, horizonKeys, keyB, archRecords, archB, baseRSS/(1<<20), est/(1<<30), oldEst/(1<<30), allKeys/(1<<30)), est, "B", nil)
	b.logf("central: estimate per node: %.2f GiB (horizon keys %.3g × %.1f B + archive %.3g × %.3f B + base %.0f MiB); old layout %.2f GiB",
		est/(1<<30), horizonKeys, keyB, archRecords, archB, baseRSS/(1<<20), oldEst/(1<<30))
	return nil
}

// recentKeys is how many of the last keys stored the "recent" digest
// checks draw from.
const recentKeys = 1000

// checkDisk fails when the temporary directory has too little room for a
// fill of n (twice the data, for the new layout's two streams).
func (b *bench) checkDisk(n int) error {
	need := uint64(n) * 700 * 2
	free, err := freeBytes(b.root)
	if err != nil {
		return nil // not knowable here; the fill will tell
	}
	if free < need+2<<30 {
		return fmt.Errorf("%s free in %s, a fill of %s needs about %s", gib(free), b.root, thousands(float64(n)), gib(need+2<<30))
	}
	return nil
}

func gib(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

func connectJS(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Timeout(30*time.Second))
	if err != nil {
		return nil, nil, err
	}
	// A 1,000-message batch on a loaded machine can outlast the client's
	// default 5 s: the bench measures throughput, not a deadline.
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Minute))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// defaultCacheSettle is how long a restarted server is left alone before
// its memory is read (sizes.cacheSettle): longer than the server keeps a
// message block's cache after its last use (10 s), so that what is read
// is what it keeps.
const defaultCacheSettle = 12 * time.Second

// memPoint is a server's memory after a clean restart and a settle.
type memPoint struct {
	rss  float64
	heap serverMem
}

// layoutRun is one layout's server while it is filled and measured.
type layoutRun struct {
	b     *bench
	store string
	srv   *serverProc
}

// restart stops the server cleanly and starts it again on its directory,
// returning how long the start took until the streams answered.
func (l *layoutRun) restart(ctx context.Context, streams []string, probe string) (time.Duration, []*jetstream.StreamInfo, error) {
	if err := l.srv.stop(); err != nil {
		l.srv = nil
		return 0, nil, err
	}
	return l.start(ctx, streams, probe)
}

// start starts the server on its directory and asks every stream's info
// and, when probe is set, a direct get of it from the first.
func (l *layoutRun) start(ctx context.Context, streams []string, probe string) (time.Duration, []*jetstream.StreamInfo, error) {
	t0 := time.Now()
	srv, err := startServerProc(ctx, l.store, true)
	l.srv = srv
	if err != nil {
		return 0, nil, err
	}
	infos, err := answer(ctx, srv.url(), streams, probe)
	return time.Since(t0), infos, err
}

// settled waits b.size.cacheSettle and reads the server's memory.
func (l *layoutRun) settled(ctx context.Context) (memPoint, error) {
	select {
	case <-time.After(l.b.size.cacheSettle):
	case <-ctx.Done():
		return memPoint{}, ctx.Err()
	}
	var m memPoint
	var err error
	if m.rss, err = l.srv.rss(); err != nil {
		return m, err
	}
	m.heap, err = l.srv.mem()
	return m, err
}

// centralLayout fills a fresh server with n movements in one layout,
// measuring its memory half way; then kills it, restarts it, restarts it
// cleanly and measures it.
func (b *bench) centralLayout(ctx context.Context, n int, old bool) (layoutResult, error) {
	r := layoutResult{old: old, n: n}
	dir, err := b.dir("central-" + r.name())
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	l := &layoutRun{b: b, store: filepath.Join(dir, "js")}
	defer func() {
		if l.srv != nil {
			l.srv.kill()
		}
	}()
	if l.srv, err = startServerProc(ctx, l.store, true); err != nil {
		return r, err
	}
	t0 := time.Now()
	streams, err := b.fillLayout(ctx, l, n, old, &r)
	if err != nil {
		return r, err
	}
	r.fill = time.Since(t0) - r.midTime
	b.logf("central: %s layout: filled %s in %s (%s/s, not counting the measurement half way)", r.name(), thousands(float64(n)), r.fill.Round(100*time.Millisecond), thousands(rate(n, r.fill)))
	// The duplicate window passes, so that no restart rebuilds it.
	time.Sleep(fillDupWindow + time.Second)

	// The last movement stored, which every restart reads back.
	_, lastStore, lastKey := fillMsg(n-1, b.now)
	probe := central.Subject(lastStore, lastKey)

	if err := l.srv.kill(); err != nil {
		return r, err
	}
	l.srv = nil
	if r.killUp, _, err = l.start(ctx, streams, probe); err != nil {
		return r, fmt.Errorf("restart after SIGKILL: %w", err)
	}
	r.killStart = l.srv.hello.StartS
	b.logf("central: %s layout: back after SIGKILL in %.2f s (server start %.2f s)", r.name(), r.killUp.Seconds(), r.killStart)

	up, infos, err := l.restart(ctx, streams, probe)
	if err != nil {
		return r, fmt.Errorf("clean restart: %w", err)
	}
	r.cleanUp = up
	for _, in := range infos {
		r.diskBytes += in.State.Bytes
		if central.IsArchiveStream(in.Config.Name) {
			r.archMsgs = in.State.Msgs
		} else {
			r.movMsgs = in.State.Msgs
		}
	}
	// Memory is read after a restart of its own, like the one half way:
	// the direct get above loaded a block into the server's cache.
	if _, _, err := l.restart(ctx, streams, ""); err != nil {
		return r, err
	}
	if r.full, err = l.settled(ctx); err != nil {
		return r, err
	}
	b.logf("central: %s layout: clean restart in %.2f s; VmRSS %.1f MiB (%.1f B/key), heap after GC %.1f MiB; movement stream %s msgs, archive %s",
		r.name(), r.cleanUp.Seconds(), r.full.rss/(1<<20), r.full.rss/float64(n), float64(r.full.heap.HeapAlloc)/(1<<20), thousands(float64(r.movMsgs)), thousands(float64(r.archMsgs)))

	// Digest checks, each kind on a server just restarted and settled:
	// the last keys stored, and random keys of those still in the
	// movement stream.
	first := 0
	if !old {
		first = n - int(r.movMsgs)
	}
	for _, recent := range []bool{true, false} {
		if _, _, err := l.restart(ctx, streams, ""); err != nil {
			return r, err
		}
		if _, err := l.settled(ctx); err != nil {
			return r, err
		}
		lo := first
		if recent {
			lo = max(n-recentKeys, first)
		}
		grow, err := b.digestChecks(ctx, l.srv, lo, n)
		if err != nil {
			return r, err
		}
		if recent {
			r.recentGrow = grow
		} else {
			r.randomGrow = grow
		}
	}
	b.logf("central: %s layout: digest checks: VmRSS +%.1f MiB over %d recent keys, +%.1f MiB over %d random ones",
		r.name(), r.recentGrow/(1<<20), b.size.digestGets, r.randomGrow/(1<<20), b.size.digestGets)
	err = l.srv.stop()
	l.srv = nil
	return r, err
}

// answer connects to url and asks for every stream's info and, when
// subject is set, a direct get of it from the first, the movement stream.
func answer(ctx context.Context, url string, streams []string, subject string) ([]*jetstream.StreamInfo, error) {
	nc, js, err := connectJS(url)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	var infos []*jetstream.StreamInfo
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		infos = append(infos, s.CachedInfo())
	}
	if subject != "" {
		if err := directGet(nc, streams[0], subject); err != nil {
			return nil, err
		}
	}
	return infos, nil
}

// directGet asks stream for the last message on subject, as an agent's
// digest check does.
func directGet(nc *nats.Conn, stream, subject string) error {
	m, err := nc.Request(jetstream.DefaultAPIPrefix+"DIRECT.GET."+stream+"."+subject, nil, 30*time.Second)
	if err != nil {
		return fmt.Errorf("direct get %s: %w", subject, err)
	}
	if st := m.Header.Get("Status"); st != "" {
		return fmt.Errorf("direct get %s: status %s %s", subject, st, m.Header.Get("Description"))
	}
	return nil
}

// digestChecks returns the growth of the server's RSS over
// b.size.digestGets direct gets of random keys among fill movements
// lo..hi-1.
func (b *bench) digestChecks(ctx context.Context, srv *serverProc, lo, hi int) (float64, error) {
	nc, err := nats.Connect(srv.url())
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	rng := rand.New(rand.NewPCG(uint64(lo), 2))
	before, err := srv.rss()
	if err != nil {
		return 0, err
	}
	for range b.size.digestGets {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		_, store, key := fillMsg(lo+rng.IntN(hi-lo), b.now)
		if err := directGet(nc, central.StreamName, central.Subject(store, key)); err != nil {
			return 0, err
		}
	}
	after, err := srv.rss()
	return after - before, err
}

// fillLayout creates the streams of a layout and stores n movements in
// them; it returns the streams' names, the movement stream first. Half
// way, it restarts the server and records its memory in r.mid.
//
// Old: every movement in RX_MOVEMENTS with max_age 90 days. New: the
// movement stream, with a max_age of seconds, and its archive; all but the
// horizon's share of the movements go through the movement stream, which
// forgets them while the archive keeps them; then the movement stream
// gets the horizon as its max_age and the rest go through it, so that it
// ends holding the share of the keys it holds in the steady state.
func (b *bench) fillLayout(ctx context.Context, l *layoutRun, n int, old bool, r *layoutResult) ([]string, error) {
	m, _, _ := fillMsg(0, b.now)
	b.centralMsgBytes = msgBytes(m)
	nc, js, err := connectJS(l.srv.url())
	if err != nil {
		return nil, err
	}
	defer func() { nc.Close() }()
	// mid restarts the server with half of the movements stored and
	// reads its memory.
	mid := func(stored int, streams ...string) error {
		t0 := time.Now()
		nc.Close()
		time.Sleep(fillDupWindow + time.Second)
		if _, _, err := l.restart(ctx, streams, ""); err != nil {
			return err
		}
		p, err := l.settled(ctx)
		if err != nil {
			return err
		}
		r.mid, r.midN = p, stored
		if nc, js, err = connectJS(l.srv.url()); err != nil {
			return err
		}
		r.midTime = time.Since(t0)
		b.logf("central: %s layout: %s stored: VmRSS %.1f MiB, heap after GC %.1f MiB", r.name(), thousands(float64(stored)), p.rss/(1<<20), float64(p.heap.HeapAlloc)/(1<<20))
		return nil
	}
	if old {
		cfg := central.StreamConfig(central.StreamOptions{MaxAge: oldMaxAge, DuplicateWindow: fillDupWindow})
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			return nil, err
		}
		half := n / 2
		if err := b.publishRange(ctx, js, 0, half, nil); err != nil {
			return nil, err
		}
		if err := waitMsgs(ctx, js, cfg.Name, uint64(half)); err != nil {
			return nil, err
		}
		if err := mid(half, cfg.Name); err != nil {
			return nil, err
		}
		if err := b.publishRange(ctx, js, half, n, nil); err != nil {
			return nil, err
		}
		return []string{cfg.Name}, waitMsgs(ctx, js, cfg.Name, uint64(n))
	}
	o := central.StreamOptions{MaxAge: b.size.fillAge, DuplicateWindow: fillDupWindow}
	mcfg, acfg := central.StreamConfig(o), central.ArchiveConfig(o)
	if _, err := js.CreateStream(ctx, mcfg); err != nil {
		return nil, err
	}
	if _, err := js.CreateStream(ctx, acfg); err != nil {
		return nil, err
	}
	tail := int(float64(n) * (central.DefaultHorizon.Hours() / central.DefaultRetention.Hours()))
	bulk := n - tail
	half := bulk / 2
	lag := func(published int) error {
		return waitFor(ctx, 10*time.Minute, 50*time.Millisecond, func() (bool, error) {
			s, err := js.Stream(ctx, acfg.Name)
			if err != nil {
				return false, err
			}
			return int(s.CachedInfo().State.Msgs) >= published-fillMaxLag, nil
		})
	}
	// drained waits until the archive holds the first k and the movement
	// stream has forgotten them.
	drained := func(k int) error {
		if err := waitMsgs(ctx, js, acfg.Name, uint64(k)); err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		if err := waitMsgs(ctx, js, mcfg.Name, 0); err != nil {
			return fmt.Errorf("movement stream expiring: %w", err)
		}
		return nil
	}
	if err := b.publishRange(ctx, js, 0, half, lag); err != nil {
		return nil, err
	}
	if err := drained(half); err != nil {
		return nil, err
	}
	if err := mid(half, mcfg.Name, acfg.Name); err != nil {
		return nil, err
	}
	if err := b.publishRange(ctx, js, half, bulk, lag); err != nil {
		return nil, err
	}
	if err := drained(bulk); err != nil {
		return nil, err
	}
	mcfg.MaxAge = central.DefaultHorizon
	if _, err := js.UpdateStream(ctx, mcfg); err != nil {
		return nil, err
	}
	if err := b.publishRange(ctx, js, bulk, n, nil); err != nil {
		return nil, err
	}
	if err := waitMsgs(ctx, js, mcfg.Name, uint64(tail)); err != nil {
		return nil, err
	}
	return []string{mcfg.Name, acfg.Name}, waitMsgs(ctx, js, acfg.Name, uint64(n))
}

// waitMsgs waits until stream holds want messages.
func waitMsgs(ctx context.Context, js jetstream.JetStream, stream string, want uint64) error {
	var have uint64
	err := waitFor(ctx, 10*time.Minute, 100*time.Millisecond, func() (bool, error) {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return false, err
		}
		have = s.CachedInfo().State.Msgs
		return have == want, nil
	})
	if errors.Is(err, errTimeout) {
		return fmt.Errorf("%s holds %d messages, want %d", stream, have, want)
	}
	return err
}

// publishRange stores fill movements lo..hi-1 in atomic batches, with
// fillWorkers batches in flight; after every fillChunk it calls between,
// if set, with the count published so far.
func (b *bench) publishRange(ctx context.Context, js jetstream.JetStream, lo, hi int, between func(int) error) error {
	for from := lo; from < hi; from += fillChunk {
		to := min(from+fillChunk, hi)
		g, gctx := errgroup.WithContext(ctx)
		next := make(chan int)
		for range fillWorkers {
			g.Go(func() error {
				msgs := make([]*nats.Msg, 0, fillBatch)
				for start := range next {
					msgs = msgs[:0]
					for i := start; i < min(start+fillBatch, to); i++ {
						m, _, _ := fillMsg(i, b.now)
						msgs = append(msgs, m)
					}
					if _, err := jetstreamext.PublishMsgBatch(gctx, js, msgs); err != nil {
						return fmt.Errorf("batch at %d: %w", start, err)
					}
				}
				return nil
			})
		}
		g.Go(func() error {
			defer close(next)
			for start := from; start < to; start += fillBatch {
				select {
				case next <- start:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			return nil
		})
		if err := g.Wait(); err != nil {
			return err
		}
		if between != nil {
			if err := between(to); err != nil {
				return err
			}
		}
		if (to-lo)%(10*fillChunk) == 0 {
			b.logf("central: published %s", thousands(float64(to)))
		}
	}
	return nil
}

// partResult is the store rate of one layout over the rounds.
type partResult struct {
	n       int
	elapsed time.Duration
	cpu     float64 // server CPU seconds
	client  float64 // this process's CPU seconds (the publishers)
	mach    cpuTimes
}

func (r partResult) rate() float64 { return rate(r.n, r.elapsed) }

// centralPartitions compares the store rate of single publishes from many
// stores against one server (sync_interval always) holding both layouts:
// RX_MOVEMENTS and its archive, and four partitions, each a movement
// stream and its archive. The layouts take turns in rounds.
func (b *bench) centralPartitions(ctx context.Context) error {
	dir, err := b.dir("central-partitions")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	type variant struct {
		parts   int
		archive bool
		noSync  bool // a diagnosis: the server without sync_interval always
	}
	variants := []variant{{1, true, false}, {4, true, false}, {1, false, false}, {4, false, false}, {1, true, true}, {4, true, true}}
	res := make(map[variant]*partResult)
	// Each variant has a server of its own, started for its turn, so
	// that the streams of one do not weigh on the other.
	for r := range b.size.partRounds {
		order := variants
		if r%2 == 1 {
			order = []variant{variants[1], variants[0], variants[3], variants[2], variants[5], variants[4]}
		}
		for _, v := range order {
			name := fmt.Sprintf("p%d-archive-%v-nosync-%v", v.parts, v.archive, v.noSync)
			got, err := b.partitionRound(ctx, filepath.Join(dir, name), v.parts, v.archive, v.noSync, r)
			if err != nil {
				return fmt.Errorf("%d partitions: %w", v.parts, err)
			}
			b.logf("central: round %d: %d partition(s), archive %v, no sync %v: %s stored in %s: %s/s, server CPU %.0f%% of a core, publishers %.0f%%, machine %s",
				r+1, v.parts, v.archive, v.noSync, thousands(float64(got.n)), got.elapsed.Round(time.Millisecond), thousands(got.rate()), 100*got.cpu/got.elapsed.Seconds(), 100*got.client/got.elapsed.Seconds(), got.mach)
			acc := res[v]
			if acc == nil {
				acc = &partResult{}
				res[v] = acc
			}
			acc.n += got.n
			acc.elapsed += got.elapsed
			acc.cpu += got.cpu
			acc.client += got.client
			acc.mach = acc.mach.plus(got.mach)
		}
	}
	one, four := res[variants[0]], res[variants[1]]
	oneNA, fourNA := res[variants[2]], res[variants[3]]
	oneNS, fourNS := res[variants[4]], res[variants[5]]
	cpu := func(p *partResult) string {
		return fmt.Sprintf("%.0f%% of a core, %.0f µs a movement; publishers %.0f%% of a core; machine %s", 100*p.cpu/p.elapsed.Seconds(), 1e6*p.cpu/float64(p.n), 100*p.client/p.elapsed.Seconds(), p.mach)
	}
	load := fmt.Sprintf("%d connections, one store each, %d single publishes in flight each (PublishMsgAsync of the agent's message to its partition's subject; the account mapping a store uses in production is left out, it does not change what the stream stores), %d rounds of %s taking turns, a fresh server with sync_interval always for each turn",
		b.size.partConns, b.size.partInFlight, b.size.partRounds, b.size.partRound)
	b.rep.ratio(scnCentral, "central_partitions_4_vs_1", fmt.Sprintf("store rate, 4 partitions (movement stream + archive each) vs 1, %s; %s/s (server %s)", load, thousands(four.rate()), cpu(four)),
		four.rate()/one.rate(), fmt.Sprintf("1 partition: %s/s (server %s)", thousands(one.rate()), cpu(one)), atLeast(2))
	b.rep.ratio(scnCentral, "central_partitions_4_vs_1_no_archive", fmt.Sprintf("the same without the archives: 4 movement streams %s/s (server %s)", thousands(fourNA.rate()), cpu(fourNA)),
		fourNA.rate()/oneNA.rate(), fmt.Sprintf("1 movement stream: %s/s (server %s)", thousands(oneNA.rate()), cpu(oneNA)), nil)
	// What the disk allows: appends with an fsync each, from one file and
	// from as many files in parallel as the layouts have streams.
	fsync := make(map[int]float64)
	for _, files := range []int{1, 2, 4, 8} {
		r, err := fsyncRate(ctx, filepath.Join(dir, "fsync"), files, min(2*time.Second, b.size.partRound))
		if err != nil {
			return err
		}
		fsync[files] = r
		b.logf("central: disk: %d file(s) appended with an fsync each, in parallel: %s fsyncs/s", files, thousands(r))
	}
	b.rep.ratio(scnCentral, "central_fsync_8_files_vs_1", fmt.Sprintf("the disk: %d-byte appends with an fsync each, 8 files in parallel (%s/s; 2 files %s/s, 4 files %s/s) vs one file", b.centralMsgBytes, thousands(fsync[8]), thousands(fsync[2]), thousands(fsync[4])),
		fsync[8]/fsync[1], fmt.Sprintf("one file: %s fsyncs/s", thousands(fsync[1])), nil)
	b.rep.ratio(scnCentral, "central_partitions_4_vs_1_nosync", fmt.Sprintf("the same with archives, the server without sync_interval always (a diagnosis: no fsync per message): 4 partitions %s/s (server %s)", thousands(fourNS.rate()), cpu(fourNS)),
		fourNS.rate()/oneNS.rate(), fmt.Sprintf("1 partition: %s/s (server %s)", thousands(oneNS.rate()), cpu(oneNS)), nil)
	b.rep.value(scnCentral, "central_store_rate_1_partition", "store rate, 1 partition with its archive", one.rate(), "msg/s", nil)
	b.rep.value(scnCentral, "central_store_rate_4_partitions", "store rate, 4 partitions with their archives", four.rate(), "msg/s", nil)
	return nil
}

// fsyncRate appends records of 600 bytes to files files in dir, each
// append followed by an fsync, one goroutine per file, for d, and returns
// the fsyncs per second of all together.
func fsyncRate(ctx context.Context, dir string, files int, d time.Duration) (float64, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	g, _ := errgroup.WithContext(ctx)
	counts := make([]int, files)
	deadline := time.Now().Add(d)
	start := time.Now()
	for i := range files {
		g.Go(func() error {
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				return err
			}
			defer f.Close()
			rec := make([]byte, 600)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if _, err := f.Write(rec); err != nil {
					return err
				}
				if err := f.Sync(); err != nil {
					return err
				}
				counts[i]++
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	return rate(total, time.Since(start)), nil
}

// partitionRound starts a server on dir with the streams of a layout of
// parts partitions, publishes to it for one round and returns what was
// acknowledged in it.
func (b *bench) partitionRound(ctx context.Context, dir string, parts int, archive, noSync bool, round int) (partResult, error) {
	if err := os.RemoveAll(dir); err != nil {
		return partResult{}, err
	}
	srv, err := startServerProc(ctx, dir, noSync)
	if err != nil {
		return partResult{}, err
	}
	defer func() {
		srv.stop()
		os.RemoveAll(dir)
	}()
	nc, js, err := connectJS(srv.url())
	if err != nil {
		return partResult{}, err
	}
	for p := range parts {
		o := central.StreamOptions{Partitions: parts, Partition: p}
		if _, err := js.CreateStream(ctx, central.StreamConfig(o)); err != nil {
			nc.Close()
			return partResult{}, err
		}
		if archive {
			if _, err := js.CreateStream(ctx, central.ArchiveConfig(o)); err != nil {
				nc.Close()
				return partResult{}, err
			}
		}
	}
	nc.Close()

	// A pool of real payloads and digests; every message gets a fresh
	// random key, so that the publishers spend little CPU.
	pool := make([]*nats.Msg, 64)
	for i := range pool {
		pool[i], _, _ = fillMsg(i, b.now)
	}
	conns := b.size.partConns
	var mu stdsync.Mutex
	total := 0
	var firstErr error
	cpu0, err := srv.cpuSeconds()
	if err != nil {
		return partResult{}, err
	}
	mach0, err := machineCPU()
	if err != nil {
		return partResult{}, err
	}
	self0, err := selfCPU()
	if err != nil {
		return partResult{}, err
	}
	start := time.Now()
	deadline := start.Add(b.size.partRound)
	var wg stdsync.WaitGroup
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := publishStore(ctx, srv.url(), fmt.Sprintf("P%03d", c), parts, b.size.partInFlight, pool, deadline, uint64(round*conns+c))
			mu.Lock()
			total += n
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	cpu1, err := srv.cpuSeconds()
	if err != nil {
		return partResult{}, err
	}
	mach1, err := machineCPU()
	if err != nil {
		return partResult{}, err
	}
	self1, err := selfCPU()
	if err != nil {
		return partResult{}, err
	}
	if firstErr != nil {
		return partResult{}, firstErr
	}
	return partResult{n: total, elapsed: el, cpu: cpu1 - cpu0, client: self1 - self0, mach: mach1.minus(mach0)}, nil
}

// publishStore publishes single movements of store to its partition with
// inFlight unacknowledged at most until deadline, and returns how many
// were acknowledged as stored.
func publishStore(ctx context.Context, url, store string, parts, inFlight int, pool []*nats.Msg, deadline time.Time, seed uint64) (int, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(inFlight))
	if err != nil {
		return 0, err
	}
	p := central.Partition(store, parts)
	rng := rand.New(rand.NewPCG(seed, 7))
	var k [16]byte
	var futs []jetstream.PubAckFuture
	stored := 0
	settle := func(all bool) error {
		for len(futs) > 0 && (all || len(futs) >= inFlight) {
			select {
			case <-futs[0].Ok():
				stored++
			case err := <-futs[0].Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
			futs = futs[1:]
		}
		return nil
	}
	for seq := uint64(1); time.Now().Before(deadline); seq++ {
		tmpl := pool[rng.IntN(len(pool))]
		for i := 0; i < len(k); i += 8 {
			v := rng.Uint64()
			for j := range 8 {
				k[i+j] = byte(v >> (8 * j))
			}
		}
		key := hex.EncodeToString(k[:])
		m := nats.NewMsg(central.PartitionSubject(p, parts, store, key))
		for h, vs := range tmpl.Header {
			m.Header[h] = vs
		}
		digest := central.DigestOf(tmpl.Header)
		m.Header.Set(central.HeaderMsgID, central.MsgID(key, digest))
		m.Header.Set(central.HeaderStore, store)
		m.Header.Set(central.HeaderSeq, fmt.Sprint(seq))
		m.Data = tmpl.Data
		f, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute))
		if err != nil {
			return stored, err
		}
		futs = append(futs, f)
		if err := settle(false); err != nil {
			return stored, err
		}
	}
	// The round's time runs until the last acknowledgement.
	err = settle(true)
	return stored, err
}

// centralSizeNote describes the sizes of a central run.
func centralSizeNote(s sizes) string {
	return strings.Join([]string{
		fmt.Sprintf("%s retained keys a layout", thousands(float64(s.centralKeys))),
		fmt.Sprintf("%d digest checks a kind", s.digestGets),
		fmt.Sprintf("partitions: %d rounds of %s", s.partRounds, s.partRound),
	}, ", ")
}

// cpuTimes are the machine's CPU times, in clock ticks, from /proc/stat.
type cpuTimes struct{ busy, idle, iowait float64 }

func (c cpuTimes) minus(o cpuTimes) cpuTimes {
	return cpuTimes{c.busy - o.busy, c.idle - o.idle, c.iowait - o.iowait}
}

func (c cpuTimes) plus(o cpuTimes) cpuTimes {
	return cpuTimes{c.busy + o.busy, c.idle + o.idle, c.iowait + o.iowait}
}

// String gives the shares of all cores' time: busy, idle, waiting for I/O.
func (c cpuTimes) String() string {
	t := c.busy + c.idle + c.iowait
	if t <= 0 {
		return "busy ?"
	}
	return fmt.Sprintf("busy %.0f%%, idle %.0f%%, iowait %.0f%%", 100*c.busy/t, 100*c.idle/t, 100*c.iowait/t)
}

// machineCPU reads the machine's CPU times from /proc/stat.
func machineCPU() (cpuTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return cpuTimes{}, errors.New("unreadable /proc/stat")
	}
	var v [7]float64
	for i := range v {
		if v[i], err = strconv.ParseFloat(f[i+1], 64); err != nil {
			return cpuTimes{}, err
		}
	}
	// user nice system idle iowait irq softirq
	return cpuTimes{busy: v[0] + v[1] + v[2] + v[5] + v[6], idle: v[3], iowait: v[4]}, nil
}

// selfCPU is the CPU time this process has used, in seconds.
func selfCPU() (float64, error) { return procCPUSeconds("self") }
