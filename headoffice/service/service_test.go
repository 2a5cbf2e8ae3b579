package service

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/testkit/pgtest"
)

// await waits for ch, failing with what was awaited after a minute.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("not within a minute: %s", what)
	}
	var zero T
	return zero
}

func readyz(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// TestSupervisorKeepsTheOthersRunning runs a job that always fails
// beside one that completes passes: the failing one is retried (its
// runs counted as errors) while the other goes on passing, and /readyz
// is 503 while the good one is in its first pass, then 200 with the
// failing one shown retrying.
func TestSupervisorKeepsTheOthersRunning(t *testing.T) {
	failures := make(chan struct{}, 100)
	release := make(chan struct{})
	passes := make(chan struct{}, 100)
	s := New(Options{Policy: retry.Policy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}, Jobs: []Job{
		{Name: "broken", Run: func(ctx context.Context, p *Pass) error {
			failures <- struct{}{}
			return errors.New("postgres 127.0.0.1: connection refused")
		}},
		{Name: "good", Run: func(ctx context.Context, p *Pass) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			for {
				p.Done(ResultOK)
				passes <- struct{}{}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Millisecond):
				}
			}
		}},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	for range 3 {
		await(t, failures, "the failing job tried again")
	}
	if code, body := readyz(t, s.Handler()); code != http.StatusServiceUnavailable || !strings.Contains(body, "good: starting (first pass not completed)") {
		t.Errorf("readyz before the good job's first pass: %d %q, want 503 naming it", code, body)
	}
	close(release)
	for range 5 {
		await(t, passes, "the good job's passes")
	}
	await(t, failures, "the failing job tried again after the good one passed")
	code, body := readyz(t, s.Handler())
	if code != http.StatusOK || !strings.Contains(body, "broken: retrying (last error: postgres 127.0.0.1: connection refused)") {
		t.Errorf("readyz: %d %q, want 200 with the failing job retrying", code, body)
	}
	cancel()
	if err := await(t, ran, "Run to return"); err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, j := range s.Status() {
		if j.State != StateStopped {
			t.Errorf("job %s: %s after Run returned, want stopped", j.Job, j.State)
		}
	}
}

// TestSupervisorStopIsBounded: a job that does not end when asked is
// named by Run's error once StopTimeout has passed.
func TestSupervisorStopIsBounded(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	started := make(chan struct{})
	s := New(Options{StopTimeout: 50 * time.Millisecond, Jobs: []Job{{Name: "stuck", Run: func(ctx context.Context, p *Pass) error {
		close(started)
		<-stuck
		return nil
	}}}})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	await(t, started, "the job to start")
	cancel()
	if err := await(t, ran, "Run to give up on the stuck job"); err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Errorf("Run: %v, want an error naming the stuck job", err)
	}
}

func pgConfig(t *testing.T, pg *pgtest.Server, db string) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pg.SuperURL(db))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestLeaseStandbyTakesOver runs two supervisors of the same job against
// one real PostgreSQL: only the first runs it, the second shows it as a
// standby (and is ready); once the first stops, the second runs it.
func TestLeaseStandbyTakesOver(t *testing.T) {
	pg := pgtest.Start(t)
	pg.CreateDB(t, "lease")
	cfg := pgConfig(t, pg, "lease")
	var running atomic.Int32
	ran := make(chan string, 10)
	job := func(who string) Job {
		return Job{Name: "sink", Lease: true, Run: func(ctx context.Context, p *Pass) error {
			if running.Add(1) != 1 {
				t.Errorf("%s runs the job while the other does", who)
			}
			defer running.Add(-1)
			p.Done(ResultOK)
			ran <- who
			<-ctx.Done()
			return ctx.Err()
		}}
	}
	leaser := &Leaser{Config: cfg.ConnConfig, Poll: 20 * time.Millisecond}
	first := New(Options{Leaser: leaser, Jobs: []Job{job("first")}})
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan error, 1)
	go func() { done1 <- first.Run(ctx1) }()
	if who := await(t, ran, "the first service to run the job"); who != "first" {
		t.Fatalf("%s ran the job first", who)
	}
	second := New(Options{Leaser: leaser, Jobs: []Job{job("second")}})
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	done2 := make(chan error, 1)
	go func() { done2 <- second.Run(ctx2) }()
	deadline := time.Now().Add(time.Minute)
	for second.Status()[0].State != StateStandby {
		if time.Now().After(deadline) {
			t.Fatalf("the second service's job is %s, want standby", second.Status()[0].State)
		}
		time.Sleep(10 * time.Millisecond) // polled: the state the lease's wait sets
	}
	if code, body := readyz(t, second.Handler()); code != http.StatusOK || !strings.Contains(body, "sink: standby") {
		t.Errorf("the standby's readyz: %d %q", code, body)
	}
	stop1()
	await(t, done1, "the first service to stop")
	if who := await(t, ran, "the standby to take the job over"); who != "second" {
		t.Fatalf("%s ran the job after the first stopped", who)
	}
	stop2()
	await(t, done2, "the second service to stop")
}

// TestPGState keeps a verification state in a real PostgreSQL, migrated
// by the sink's schema: none before a save, the last one saved after.
func TestPGState(t *testing.T) {
	pg := pgtest.Start(t)
	pg.CreateDB(t, "state")
	ctx := context.Background()
	cfg := pgConfig(t, pg, "state")
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := PGState{Pool: pool, Name: "service"}
	if _, err := st.Load(ctx); !errors.Is(err, audit.ErrNoState) {
		t.Fatalf("Load before a save: %v, want audit.ErrNoState", err)
	}
	for _, b := range []string{"one", "two"} {
		if err := st.Save(ctx, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := st.Load(ctx); err != nil || string(b) != "two" {
		t.Fatalf("Load: %q, %v; want the last state saved", b, err)
	}
	var _ audit.StateStore = st
}

// TestRecordPass records findings pass by pass: a finding is opened once
// and found again, a standing one closes at the first pass that does not
// find it, one of the archive's only at a pass that verified every log
// again; the state is saved with them.
func TestRecordPass(t *testing.T) {
	ctx := context.Background()
	_, pool := migratedDB(t, "findings")
	altered := audit.Finding{Store: "S0001", Log: "L1", Kind: audit.KindAltered, From: 4, To: 4, Sizes: []int64{5}, Detail: "leaf 4 differs"}
	missingCP := audit.Finding{Store: "S0002", Log: "L2", Kind: audit.KindCheckpointMissing, Sizes: []int64{9}, Detail: "newest checkpoint not archived"}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i, tc := range []struct {
		rep                  audit.Report
		opened, closed, open int64
	}{
		{audit.Report{Findings: []audit.Finding{altered, missingCP}, Counts: map[string]int{}}, 2, 0, 2},
		{audit.Report{Incremental: true, Findings: []audit.Finding{altered, missingCP}, Counts: map[string]int{}}, 0, 0, 2},
		{audit.Report{Incremental: true, Counts: map[string]int{}}, 0, 1, 1},
		{audit.Report{Incremental: true, Counts: map[string]int{audit.KindArchiveRewritten: 1},
			Findings: []audit.Finding{{Store: "S0001", Stream: "RX_ARCHIVE", Kind: audit.KindArchiveRewritten, Detail: "recreated"}}}, 1, 1, 1},
	} {
		opened, closed, err := recordPass(ctx, pool, nil, "service", []byte{byte(i)}, &tc.rep, t0.Add(time.Duration(i)*time.Minute))
		var open int64
		if err == nil {
			err = pool.QueryRow(ctx, `SELECT count(*) FROM verify_findings WHERE closed_at IS NULL`).Scan(&open)
		}
		if err != nil || opened != tc.opened || closed != tc.closed || open != tc.open {
			t.Errorf("pass %d: opened %d, closed %d, open %d, %v; want %d, %d, %d", i, opened, closed, open, err, tc.opened, tc.closed, tc.open)
		}
		if b, err := (PGState{Pool: pool, Name: "service"}).Load(ctx); err != nil || len(b) != 1 || b[0] != byte(i) {
			t.Errorf("pass %d: state %v, %v; want the pass's", i, b, err)
		}
	}
}

// TestVerifyStateFencedAgainstAStaleHolder records verification passes
// as a service whose lease's connection ended (its backend terminated)
// and has not noticed yet, while a standby took the lease over: the
// stale holder's pass is refused (ErrLeaseLost) and writes nothing; the
// new holder's is recorded.
func TestVerifyStateFencedAgainstAStaleHolder(t *testing.T) {
	ctx := context.Background()
	cfg, pool := migratedDB(t, "fence")
	// The lease's own check of its connection is slower than the test,
	// as a stale holder's can be: it has not noticed the loss.
	leaser := &Leaser{Config: cfg.ConnConfig, Poll: 20 * time.Millisecond, Check: time.Hour}
	stale, err := leaser.Acquire(ctx, JobVerify, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Release()
	rep := &audit.Report{Incremental: true, Counts: map[string]int{}}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if _, _, err := recordPass(ctx, pool, stale.Fence, VerifyStateName, []byte("first"), rep, now); err != nil {
		t.Fatalf("the holder's pass: %v", err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, int64(stale.pid)); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	fresh, err := leaser.Acquire(actx, JobVerify, nil)
	if err != nil {
		t.Fatalf("the standby's lease once the holder's connection ended: %v", err)
	}
	defer fresh.Release()
	if _, _, err := recordPass(ctx, pool, fresh.Fence, VerifyStateName, []byte("fresh"), rep, now.Add(time.Minute)); err != nil {
		t.Fatalf("the new holder's pass: %v", err)
	}
	_, _, err = recordPass(ctx, pool, stale.Fence, VerifyStateName, []byte("stale"), rep, now.Add(2*time.Minute))
	if !errors.Is(err, ErrLeaseLost) {
		t.Errorf("the stale holder's pass: %v, want ErrLeaseLost", err)
	}
	if b, err := (PGState{Pool: pool, Name: VerifyStateName}).Load(ctx); err != nil || string(b) != "fresh" {
		t.Errorf("state %q, %v; want the new holder's", b, err)
	}
	var passes int64
	if err := pool.QueryRow(ctx, `SELECT passes FROM verify_state WHERE name = $1`, VerifyStateName).Scan(&passes); err != nil || passes != 2 {
		t.Errorf("verify_state counts %d passes (%v), want 2", passes, err)
	}
	if stale.Context().Err() == nil {
		t.Errorf("the stale lease's context did not end once its loss was found")
	}
}

// migratedDB starts a real PostgreSQL with a database of the sink's
// schema, and returns its configuration and a pool on it (closed with the
// test).
func migratedDB(t *testing.T, name string) (*pgxpool.Config, *pgxpool.Pool) {
	t.Helper()
	pg := pgtest.Start(t)
	pg.CreateDB(t, name)
	ctx := context.Background()
	cfg := pgConfig(t, pg, name)
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := sink.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return cfg, pool
}
