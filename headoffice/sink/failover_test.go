package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
	"github.com/rxedge/agent/testkit/syncbuf"
)

// failoverN is how many movements each TestFailover case sends:
// RXEDGE_SINK_FAILOVER_N, or a size the default test run affords.
func failoverN(t *testing.T) int {
	if v := os.Getenv("RXEDGE_SINK_FAILOVER_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			t.Fatalf("RXEDGE_SINK_FAILOVER_N=%q: want a number of at least 1000", v)
		}
		return n
	}
	return 6000
}

// TestFailover runs the sink against a PostgreSQL primary with a
// streaming-replication standby, through a connection string that lists
// both (target_session_attrs=read-write), while movements are archived.
// The primary dies while the sink's transaction is open, the standby is
// promoted, and the sink goes on writing to it. Afterwards every movement
// is in the new primary's table once, the stored position is the
// archive's last sequence, and Verify finds nothing missing, different or
// extra.
//
// Synchronous (the standby in synchronous_standby_names, commits wait for
// its flush; the primary stopped with an immediate shutdown): the standby
// holds every commit the sink was told of, so the position never goes
// back. Asynchronous (the primary killed with SIGKILL): the standby has
// stopped receiving WAL a few commits before, as a lagging or cut-off
// standby does, so the promoted database lacks the sink's last batches
// and their position with them; the sink finds its position behind its
// last commit, says so (log and rxedge_sink_rewinds_total), and reads the
// archive again from the stored position.
func TestFailover(t *testing.T) {
	for _, tc := range []struct {
		name string
		sync bool
		kill string // "immediate" or "sigkill"
	}{
		{"synchronous", true, "immediate"},
		{"asynchronous", false, "sigkill"},
	} {
		t.Run(tc.name, func(t *testing.T) { testFailover(t, tc.sync, tc.kill) })
	}
}

func testFailover(t *testing.T, syncRep bool, kill string) {
	n := failoverN(t)
	const stores, batch = 50, 100
	primary := pgtest.Start(t)
	db := newDB(t, primary)
	standby := primary.StartStandby(t, "standby1")
	primary.WaitStreaming(t, "standby1", false)
	if syncRep {
		primary.Exec(t, "postgres", `ALTER SYSTEM SET synchronous_standby_names = 'standby1'`)
		primary.Exec(t, "postgres", `ALTER SYSTEM SET synchronous_commit = 'on'`)
		primary.Exec(t, "postgres", `SELECT pg_reload_conf()`)
		primary.WaitStreaming(t, "standby1", true)
	}

	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	release := make(chan int, 2)
	var published atomic.Int64
	pubDone := make(chan error, 1)
	go func() { pubDone <- publishArchive(ctx, js, n, stores, release, &published) }()

	cfg, err := pgxpool.ParseConfig(pgtest.MultiURL("postgres", pgtest.SuperPassword, db.name, primary, standby))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	m := NewMetrics()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	sinkDone := make(chan error, 1)
	go func() {
		_, err := Run(sctx, Options{Conn: nc, Postgres: cfg, Batch: batch, FlushInterval: 20 * time.Millisecond, Metrics: m,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		sinkDone <- err
	}()
	state := func() string {
		return fmt.Sprintf("%d published; sink log:\n%s", published.Load(), logs.Tail(20))
	}

	release <- n / 2
	awaitPosition(t, primary, db.name, uint64(n/4), sinkDone, state)

	if !syncRep {
		// The standby stops receiving (primary_conninfo emptied, the WAL
		// receiver ends); the primary goes on committing without it.
		standby.Exec(t, "postgres", `ALTER SYSTEM SET primary_conninfo = ''`)
		standby.Exec(t, "postgres", `SELECT pg_reload_conf()`)
		awaitQuery(t, standby, "postgres", `SELECT count(*) = 0 FROM pg_stat_wal_receiver`, "the standby's WAL receiver to stop", sinkDone, state)
		// What it received before may not be replayed yet (a busy
		// machine): its position is final once replay has caught up.
		awaitQuery(t, standby, "postgres", `SELECT COALESCE(pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn(), true)`, "the standby to replay all it received", sinkDone, state)
		cut := position(t, standby, db.name)
		p := awaitPosition(t, primary, db.name, cut+3*batch, sinkDone, state)
		t.Logf("the standby stopped receiving at position %d; the primary committed on to %d", cut, p)
	}
	release <- n

	// Mid-batch: the primary dies while the sink's transaction is open.
	awaitQuery(t, primary, db.name, `SELECT count(*) > 0 FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND xact_start IS NOT NULL`,
		"a transaction of the sink's on the primary", sinkDone, state)
	before := m.posOf0()
	switch kill {
	case "immediate":
		err = primary.Stop("immediate")
	default:
		err = primary.Kill()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	promotedAt := position(t, standby, db.name)
	t.Logf("primary stopped (%s) with the sink at position %d; the promoted standby holds position %d; %d published",
		kill, before, promotedAt, published.Load())

	if err := <-pubDone; err != nil {
		t.Fatalf("publish: %v", err)
	}
	awaitPosition(t, standby, db.name, uint64(n), sinkDone, state)
	stop()
	if err := <-sinkDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("sink ended with %v, want it to run until stopped", err)
	}

	body := scrape(t, m)
	failures := metricValue(body, `rxedge_sink_write_failures_total{archive="RX_ARCHIVE"}`)
	rewinds := metricValue(body, `rxedge_sink_rewinds_total{archive="RX_ARCHIVE"}`)
	t.Logf("%d movements; %v failed writes retried, %v rewinds", n, failures, rewinds)
	if failures < 1 {
		t.Errorf("no write failed: the primary did not die under a batch")
	}
	rewound := strings.Contains(logs.String(), "the stored position is behind the last commit")
	if syncRep {
		if rewinds != 0 || rewound || promotedAt < before {
			t.Errorf("synchronous: the position went back (%v rewinds, from %d to %d)", rewinds, before, promotedAt)
		}
	} else {
		if promotedAt >= before {
			t.Errorf("asynchronous: the promoted standby holds position %d, the sink had committed %d: nothing was lost, the case shows nothing", promotedAt, before)
		}
		if rewinds < 1 || !rewound {
			t.Errorf("asynchronous: %v rewinds, rewind logged %v; want the rewind counted and logged", rewinds, rewound)
		}
	}

	// Exactly once, on the new primary.
	ndb := &testDB{pg: standby, name: db.name, url: standby.SuperURL(db.name)}
	if got := ndb.count(t, `SELECT count(*) FROM movements`); got != int64(n) {
		t.Errorf("movements holds %d rows, want %d", got, n)
	}
	if got := ndb.count(t, `SELECT count(DISTINCT (store_id, seq)) FROM movements`); got != int64(n) {
		t.Errorf("movements holds %d store sequences, want %d", got, n)
	}
	if got := ndb.count(t, `SELECT (SELECT count(*) FROM movement_repeats) + (SELECT count(*) FROM movement_conflicts) + (SELECT count(*) FROM sink_rejects)`); got != 0 {
		t.Errorf("%d repeats, conflicts and rejects, want none", got)
	}
	st, err := js.Stream(ctx, central.ArchiveStreamName)
	if err != nil {
		t.Fatal(err)
	}
	last := st.CachedInfo().State.LastSeq
	if got := position(t, standby, db.name); got != last || last != uint64(n) {
		t.Errorf("stored position %d, archive's last sequence %d, movements %d", got, last, n)
	}
	v, err := Verify(ctx, ndb.conn(t), VerifyOptions{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() || len(v.Streams) != 1 || v.Streams[0].Missing+v.Streams[0].Different+v.Streams[0].Extra != 0 || v.Streams[0].Checked != uint64(n) {
		t.Fatalf("verify: %+v", v)
	}
}

// posOf0 is the position the metrics hold of the one archive.
func (m *Metrics) posOf0() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.posOf[central.ArchiveStreamName]
}

// publishArchive archives n movements of stores stores straight into the
// archive stream, up to the count last released.
func publishArchive(ctx context.Context, js jetstream.JetStream, n, stores int, release <-chan int, published *atomic.Int64) error {
	allowed := 0
	for i := 0; i < n; {
		for i >= allowed {
			select {
			case allowed = <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		next := min(i+256, allowed)
		var futs []jetstream.PubAckFuture
		for j := i; j < next; j++ {
			store := fmt.Sprintf("S%04d", j%stores+1)
			m := mv(store, uint64(j/stores+1), payload{})
			msg := m.Msg()
			msg.Subject = central.ArchiveSubject(m.Store)
			msg.Header.Del(central.HeaderExpectLast)
			msg.Header.Set(central.HeaderMsgID, central.MsgID(m.Key, m.Digest))
			f, err := js.PublishMsgAsync(msg)
			if err != nil {
				return err
			}
			futs = append(futs, f)
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-time.After(30 * time.Second):
				return errors.New("no acknowledgement in 30 s")
			}
		}
		i = next
		published.Store(int64(i))
	}
	return nil
}

// position reads the stored position of the archive on s.
func position(t *testing.T, s *pgtest.Server, db string) uint64 {
	t.Helper()
	ctx := testContext(t)
	c, err := pgx.Connect(ctx, s.SuperURL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var p int64
	if err := c.QueryRow(ctx, `SELECT coalesce(max(last_seq), 0) FROM sink_positions`).Scan(&p); err != nil {
		t.Fatal(err)
	}
	return uint64(p)
}

// awaitPosition polls s until the stored position reaches want and
// returns it; it fails if the sink ends or a minute passes without the
// position moving.
func awaitPosition(t *testing.T, s *pgtest.Server, db string, want uint64, sinkDone <-chan error, state func() string) uint64 {
	t.Helper()
	var got, seen uint64
	moved := time.Now()
	var err error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var c *pgx.Conn
		if c, err = pgx.Connect(ctx, s.SuperURL(db)); err == nil {
			var p int64
			err = c.QueryRow(ctx, `SELECT coalesce(max(last_seq), 0) FROM sink_positions`).Scan(&p)
			got = uint64(p)
			c.Close(ctx)
		}
		cancel()
		if err == nil && got >= want {
			return got
		}
		if got != seen {
			seen, moved = got, time.Now()
		}
		select {
		case err := <-sinkDone:
			t.Fatalf("the sink ended (%v) awaiting position %d; %s", err, want, state())
		default:
		}
		if time.Since(moved) > time.Minute {
			t.Fatalf("awaited position %d on port %d: at %d, not moving for a minute (last error %v); %s", want, s.Port(), got, err, state())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitQuery polls a query returning a boolean on s until it is true,
// with a deadline naming what was awaited.
func awaitQuery(t *testing.T, s *pgtest.Server, db, query, what string, sinkDone <-chan error, state func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, s.SuperURL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for {
		var ok bool
		if err := c.QueryRow(ctx, query).Scan(&ok); err != nil {
			t.Fatalf("awaiting %s: %v; %s", what, err, state())
		}
		if ok {
			return
		}
		select {
		case err := <-sinkDone:
			t.Fatalf("the sink ended (%v) awaiting %s; %s", err, what, state())
		case <-ctx.Done():
			t.Fatalf("awaited %s for a minute; %s", what, state())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// scrape reads the sink's /metrics.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	hs := httptest.NewServer(m.Handler())
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metricValue is the value of the series named (with its labels) in a
// scrape; 0 when absent.
func metricValue(body, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	mm := re.FindStringSubmatch(body)
	if mm == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(mm[1], 64)
	return v
}
