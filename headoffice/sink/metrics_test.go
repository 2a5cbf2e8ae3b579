package sink

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// TestServiceMetrics follows an archive as the service does and reads
// /readyz and /metrics: ready while following, the lag back to 0 after
// new movements, rows counted by outcome, a last commit time; not ready
// while PostgreSQL is down, ready again once it is back.
func TestServiceMetrics(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())
	m := NewMetrics()
	hs := httptest.NewServer(m.Handler())
	defer hs.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before start: %d, want 503", code)
	}
	archive(t, js, mv("S0001", 1, payload{}), 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Options{Conn: nc, Postgres: db.pool(t), Metrics: m, FlushInterval: 10 * time.Millisecond})
		done <- err
	}()
	defer func() {
		cancel()
		<-done
	}()
	// Polled: the sink signals nothing outside its metrics.
	await := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("awaited %s for 60 s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	await("ready", func() bool { c, _ := get("/readyz"); return c == 200 })
	for i := uint64(2); i <= 5; i++ {
		archive(t, js, mv("S0001", i, payload{}), 0)
	}
	await("position 5", func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, `rxedge_sink_position{archive="RX_ARCHIVE"} 5`)
	})
	_, body := get("/metrics")
	for _, want := range []string{
		`rxedge_sink_messages_total{archive="RX_ARCHIVE",outcome="row"} 5`,
		`rxedge_sink_last_commit_timestamp_seconds{archive="RX_ARCHIVE"}`,
		`rxedge_sink_rows_per_second`,
		`rxedge_sink_lag_messages{archive="RX_ARCHIVE"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, "00002-3227-30") || strings.Contains(body, "m-1") {
		t.Error("/metrics shows a movement's field")
	}
	await("the lag back to 0 (refreshed every 5 s)", func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, `rxedge_sink_lag_messages{archive="RX_ARCHIVE"} 0`) &&
			strings.Contains(body, `rxedge_sink_archive_last_sequence{archive="RX_ARCHIVE"} 5`)
	})

	if err := pg.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	await("not ready while PostgreSQL is down", func() bool { c, _ := get("/readyz"); return c == http.StatusServiceUnavailable })
	archive(t, js, mv("S0001", 6, payload{}), 0)
	if err := pg.StartServer(); err != nil {
		t.Fatal(err)
	}
	await("ready again", func() bool { c, _ := get("/readyz"); return c == 200 })
	await("position 6 after the restart", func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, `rxedge_sink_position{archive="RX_ARCHIVE"} 6`)
	})
	if got := db.count(t, `SELECT count(*) FROM movements`); got != 6 {
		t.Errorf("%d rows, want 6", got)
	}
}
