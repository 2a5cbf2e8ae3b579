package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/hub"
)

// The archive scenario (-only archive; not in a quick run) measures what
// the archive costs the movement stream: a drain of archiveN movements in
// atomic batches of 1,000 (the agent's headers, a 256-byte payload, 16
// stores) into central's movement stream, with and without the archive
// sourced from it, on one server and on R3 clusters, every server a
// process of its own with JetStream's sync_interval always. Each server
// runs under strace (when the machine has it) counting its fsync and
// fdatasync calls by file, so each is put down to the stream (or its Raft
// group) it was for. Layouts:
//
//	single          one server: the movement stream alone, with the archive
//	                as provisioned, and with the archive in JetStream's async
//	                persist mode (a diagnosis: allowed on one server only,
//	                and not changeable on an existing stream)
//	r3              three servers: both streams R3 on the same three
//	r3-own-nodes    six servers: the movement stream on three tagged
//	                rx:movements, the archive on three tagged rx:archive
//
// A server of a cluster is this binary started with
// RXEDGE_BENCH_ARCHIVE_NODE set to its settings (archiveNodeChild).
const (
	archiveN       = 20_000
	archiveBatch   = 1000
	archiveStores  = 16
	archivePayload = 256
	archiveNodeEnv = "RXEDGE_BENCH_ARCHIVE_NODE"
)

// archiveNode is a server's settings, passed to the child as JSON.
type archiveNode struct {
	Dir         string   `json:"dir"`
	Name        string   `json:"name"`
	ClientPort  int      `json:"client_port"`
	ClusterPort int      `json:"cluster_port,omitempty"` // 0: no cluster
	Routes      []string `json:"routes,omitempty"`
	Tags        []string `json:"tags,omitempty"`
}

func init() {
	if v := os.Getenv(archiveNodeEnv); v != "" {
		if err := archiveNodeChild(v, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// archiveNodeChild runs one server until its stdin says stop or ends,
// after writing a serverHello line.
func archiveNodeChild(settings string, stdin io.Reader, stdout io.Writer) error {
	var n archiveNode
	if err := json.Unmarshal([]byte(settings), &n); err != nil {
		return err
	}
	t0 := time.Now()
	h, err := hub.Start(hub.Options{
		Listen: fmt.Sprintf("127.0.0.1:%d", n.ClientPort), StoreDir: n.Dir, ServerName: n.Name,
		StartTimeout: 5 * time.Minute,
		Configure: func(so *server.Options) {
			so.Tags = n.Tags
			if n.ClusterPort == 0 {
				return
			}
			so.Cluster.Name = "rxedge-archive-bench"
			so.Cluster.Host = "127.0.0.1"
			so.Cluster.Port = n.ClusterPort
			so.Routes = server.RoutesFromStr(strings.Join(n.Routes, ","))
		},
	})
	if err != nil {
		return err
	}
	defer h.Shutdown()
	if err := json.NewEncoder(stdout).Encode(serverHello{URL: h.URL(), StartS: time.Since(t0).Seconds()}); err != nil {
		return err
	}
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "stop" {
			return nil
		}
	}
	return sc.Err()
}

// archiveVariant is one measured setup.
type archiveVariant struct {
	name    string
	nodes   int
	archive bool
	async   bool // the archive in async persist mode
	own     bool // the archive on nodes of its own (placement tags)
}

var archiveVariants = []archiveVariant{
	{name: "single, movement stream only", nodes: 1},
	{name: "single, with the archive", nodes: 1, archive: true},
	{name: "single, archive in async persist mode", nodes: 1, archive: true, async: true},
	{name: "r3, movement stream only", nodes: 3},
	{name: "r3, archive on the same nodes", nodes: 3, archive: true},
	{name: "r3, archive on nodes of its own", nodes: 6, archive: true, own: true},
}

// archiveResult is what one variant measured.
type archiveResult struct {
	v    archiveVariant
	rate float64 // movements/s, first batch sent to last acknowledged
	// archived is movements/s from the first batch sent to the archive
	// holding every movement: what the archive sustains.
	archived float64
	// catchUp is the time from the last acknowledgement to the archive
	// holding every movement.
	catchUp time.Duration
	// perK are fsync+fdatasync calls per 1,000 movements, by what they
	// were for: the movement stream, the archive, the rest (meta, the
	// servers' own state); movementNodes and archiveNodes average over
	// the servers that hold each stream.
	perK                        map[string]float64
	movementNodes, archiveNodes float64
	traced                      bool
}

func benchArchive(ctx context.Context, b *bench) error {
	const scn = "archive"
	if b.size.quick {
		b.rep.missing(scn, "archive_fsyncs_per_1k", "fsyncs per 1,000 drained movements with and without the archive", nil, "not measured in a quick run (-only archive)")
		return nil
	}
	strace, _ := exec.LookPath("strace")
	if strace == "" {
		b.rep.note("archive: strace is not installed; fsyncs not counted (apt-get install strace)")
	}
	results := map[string]archiveResult{}
	for _, v := range archiveVariants {
		r, err := b.archiveRun(ctx, v, strace)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		results[v.name] = r
		b.logf("archive: %s: %s movements/s (archived %s/s), archive caught up %s later; fsyncs per 1,000 movements %v (per movement-stream node %.1f, per archive node %.1f)",
			v.name, thousands(r.rate), thousands(r.archived), r.catchUp.Round(time.Millisecond), r.perK, r.movementNodes, r.archiveNodes)
	}
	key := func(name string) string {
		return strings.NewReplacer(", ", "_", " ", "_").Replace(name)
	}
	for _, v := range archiveVariants {
		r := results[v.name]
		b.rep.value(scn, "archive_rate_"+key(v.name), "drain rate, raw atomic batches of 1,000: "+v.name, r.rate, "mov/s", nil)
		if v.archive {
			b.rep.value(scn, "archive_archived_rate_"+key(v.name), fmt.Sprintf("movements archived per second, first batch to the archive holding all (%s after the drain): %s", r.catchUp.Round(time.Millisecond), v.name), r.archived, "mov/s", nil)
		}
		if !r.traced {
			continue
		}
		b.rep.value(scn, "archive_fsyncs_per_1k_"+key(v.name), fmt.Sprintf("fsync+fdatasync per 1,000 movements, all servers: %s (movement stream %.1f, archive %.1f, other %.1f)",
			v.name, r.perK["movements"], r.perK["archive"], r.perK["other"]), r.perK["movements"]+r.perK["archive"]+r.perK["other"], "calls", nil)
		b.rep.value(scn, "archive_fsyncs_per_1k_movement_node_"+key(v.name), "fsync+fdatasync per 1,000 movements on a server holding the movement stream: "+v.name, r.movementNodes, "calls", nil)
	}
	for _, pair := range [][2]string{
		{"single, with the archive", "single, movement stream only"},
		{"single, archive in async persist mode", "single, movement stream only"},
		{"r3, archive on the same nodes", "r3, movement stream only"},
		{"r3, archive on nodes of its own", "r3, movement stream only"},
	} {
		a, base := results[pair[0]], results[pair[1]]
		if base.rate > 0 {
			b.rep.ratio(scn, "archive_drain_ratio_"+key(pair[0]), "drain rate: "+pair[0]+" vs "+pair[1], a.rate/base.rate, pair[1], nil)
		}
	}
	return nil
}

// archiveRun starts the servers of v, creates the streams, drains
// archiveN movements, waits for the archive, stops the servers and
// counts their fsyncs.
func (b *bench) archiveRun(ctx context.Context, v archiveVariant, strace string) (archiveResult, error) {
	res := archiveResult{v: v, perK: map[string]float64{}, traced: strace != ""}
	dir, err := b.dir("archive-" + strings.NewReplacer(", ", "-", " ", "-").Replace(v.name))
	if err != nil {
		return res, err
	}
	ports, err := archivePorts(2 * v.nodes)
	if err != nil {
		return res, err
	}
	var routes []string
	for i := range v.nodes {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[v.nodes+i]))
	}
	var procs []*serverProc
	traces := make([]string, v.nodes)
	defer func() {
		for _, p := range procs {
			_ = p.kill()
		}
	}()
	for i := range v.nodes {
		n := archiveNode{Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), Name: fmt.Sprintf("n%d", i), ClientPort: ports[i]}
		if v.nodes > 1 {
			n.ClusterPort, n.Routes = ports[v.nodes+i], routes
		}
		if v.own {
			n.Tags = []string{"rx:movements"}
			if i >= 3 {
				n.Tags = []string{"rx:archive"}
			}
		}
		if strace != "" {
			traces[i] = filepath.Join(dir, fmt.Sprintf("n%d.strace", i))
		}
		p, err := startArchiveNode(ctx, n, strace, traces[i])
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
	}
	var urls []string
	for _, p := range procs {
		urls = append(urls, p.url())
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1))
	if err != nil {
		return res, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return res, err
	}
	groups, err := archiveStreams(ctx, js, v)
	if err != nil {
		return res, err
	}

	msgs := archiveMessages(archiveN)
	t0 := time.Now()
	for lo := 0; lo < len(msgs); lo += archiveBatch {
		bctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := jetstreamext.PublishMsgBatch(bctx, js, msgs[lo:min(lo+archiveBatch, len(msgs))])
		cancel()
		if err != nil {
			return res, fmt.Errorf("batch at %d: %w", lo, err)
		}
	}
	done := time.Now()
	res.rate = float64(len(msgs)) / done.Sub(t0).Seconds()
	if v.archive {
		if err := waitArchive(ctx, js, uint64(len(msgs))); err != nil {
			return res, err
		}
		res.catchUp = time.Since(done)
		res.archived = float64(len(msgs)) / time.Since(t0).Seconds()
	}
	nc.Close()
	for _, p := range procs {
		if err := p.stop(); err != nil {
			return res, err
		}
	}
	procs = nil
	if strace == "" {
		return res, nil
	}
	var mvNodes, arNodes, mvCalls, arCalls float64
	for i, tr := range traces {
		counts, err := countSyncs(tr, groups)
		if err != nil {
			return res, err
		}
		for k, c := range counts {
			res.perK[k] += float64(c) * 1000 / float64(len(msgs))
		}
		if counts["movements"] > 0 || !v.own || i < 3 {
			mvNodes++
			mvCalls += float64(counts["movements"] + counts["other"] + counts["archive"])
		}
		if counts["archive"] > 0 {
			arNodes++
			arCalls += float64(counts["archive"])
		}
	}
	if mvNodes > 0 {
		res.movementNodes = mvCalls * 1000 / float64(len(msgs)) / mvNodes
	}
	if arNodes > 0 {
		res.archiveNodes = arCalls * 1000 / float64(len(msgs)) / arNodes
	}
	return res, nil
}

// archiveStreams creates the movement stream (and archive) of v, waiting
// for a cluster to elect its meta leader, and returns the directory names
// of their Raft groups, by the stream they are for.
func archiveStreams(ctx context.Context, js jetstream.JetStream, v archiveVariant) (map[string]string, error) {
	o := central.StreamOptions{Replicas: 1}
	if v.nodes > 1 {
		o.Replicas = 3
	}
	mv, ar := central.StreamConfig(o), central.ArchiveConfig(o)
	if v.async {
		ar.PersistMode = jetstream.AsyncPersistMode
	}
	if v.own {
		mv.Placement = &jetstream.Placement{Tags: []string{"rx:movements"}}
		ar.Placement = &jetstream.Placement{Tags: []string{"rx:archive"}}
	}
	cfgs := []jetstream.StreamConfig{mv}
	if v.archive {
		cfgs = append(cfgs, ar)
	}
	groups := map[string]string{}
	deadline := time.Now().Add(2 * time.Minute)
	for _, cfg := range cfgs {
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			s, err := js.CreateStream(cctx, cfg)
			cancel()
			if err == nil {
				if ci := s.CachedInfo().Cluster; ci != nil && ci.RaftGroup != "" {
					groups[ci.RaftGroup] = cfg.Name
				}
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return nil, fmt.Errorf("create %s: %w", cfg.Name, err)
			}
			time.Sleep(200 * time.Millisecond) // a cluster's meta leader is being elected
		}
	}
	return groups, nil
}

// archiveMessages builds n movements of archiveStores stores as an agent
// sends them (central.Message, a 256-byte payload).
func archiveMessages(n int) []*nats.Msg {
	payload := bytes.Repeat([]byte("x"), archivePayload)
	copy(payload, `{"movement_id":"`)
	out := make([]*nats.Msg, n)
	var k [16]byte
	var d [32]byte
	for i := range out {
		_, _ = rand.Read(k[:])
		_, _ = rand.Read(d[:])
		out[i] = central.Message{Store: fmt.Sprintf("S%04d", i%archiveStores), Key: hex.EncodeToString(k[:]), Digest: hex.EncodeToString(d[:]),
			Seq: uint64(i/archiveStores + 1), EnqueuedAt: time.Now(), Payload: payload, File: central.FileLineage{ID: "0190c1b2-7a3e-7c4d-9e8f-0123456789ab"}}.Msg()
	}
	return out
}

// waitArchive polls the archive (there is no event for a source having
// copied) until it holds n messages, for at most five minutes.
func waitArchive(ctx context.Context, js jetstream.JetStream, n uint64) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		s, err := js.Stream(ctx, central.ArchiveStreamName)
		if err == nil && s.CachedInfo().State.Msgs >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the archive did not hold %d messages within 5 minutes (%v)", n, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startArchiveNode starts a server process (under strace, writing trace,
// when strace is set) and waits for its hello.
func startArchiveNode(ctx context.Context, n archiveNode, strace, trace string) (*serverProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	settings, err := json.Marshal(n)
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	if strace != "" {
		// --seccomp-bpf stops the server only at the calls counted.
		cmd = exec.Command(strace, "-f", "-qq", "--seccomp-bpf", "-y", "-e", "trace=fsync,fdatasync", "-o", trace, exe)
	} else {
		cmd = exec.Command(exe)
	}
	cmd.Env = append(os.Environ(), archiveNodeEnv+"="+string(settings))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serverProc{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), stderr: &errb}
	got := make(chan error, 1)
	go func() {
		line, err := p.out.ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &p.hello)
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			_ = p.kill()
			return nil, fmt.Errorf("server %s: %w: %s", n.Name, err, strings.TrimSpace(errb.String()))
		}
	case <-ctx.Done():
		_ = p.kill()
		return nil, ctx.Err()
	}
	p.up = time.Since(t0)
	return p, nil
}

// syncCall matches a counted call in strace's output and the file it was
// on (-y): `1234 fsync(7</dir/...>) = 0`.
var syncCall = regexp.MustCompile(`(?:fsync|fdatasync)\(\d+<([^>]*)>`)

// countSyncs reads a server's trace and counts its fsync and fdatasync
// calls by what they were for: "movements", "archive" (a stream's own
// directory, or its Raft group's, named in groups) or "other".
func countSyncs(trace string, groups map[string]string) (map[string]int, error) {
	f, err := os.Open(trace)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := syncCall.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		counts[syncTarget(m[1], groups)]++
	}
	return counts, sc.Err()
}

// syncTarget names what a synced file belongs to.
func syncTarget(path string, groups map[string]string) string {
	stream := ""
	if _, rest, ok := strings.Cut(path, "/streams/"); ok {
		stream, _, _ = strings.Cut(rest, "/")
	}
	for g, name := range groups {
		if strings.Contains(path, "/"+g+"/") {
			stream = name
		}
	}
	switch {
	case stream == central.StreamName:
		return "movements"
	case stream == central.ArchiveStreamName:
		return "archive"
	}
	return "other"
}

// archivePorts finds n free loopback ports, held until all are found.
func archivePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	if len(ports) != n {
		return nil, errors.New("no free ports")
	}
	return ports, nil
}
