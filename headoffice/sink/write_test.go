package sink

import (
	"testing"
	"time"

	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// TestDirectCopyFallsBack: a batch of new keys is copied straight into
// movements; a batch holding a key already written (here a repeat) is
// refused by the table's key, rolled back to its savepoint and staged, and
// so is the batch after it; once a staged batch holds no known key the
// next goes straight in again. Every message lands in its one table
// either way, and the metric counts the staged batches.
func TestDirectCopyFallsBack(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())
	// Batches of four, cut only by size (the flush interval is long):
	// [1-4] new, [5-8] holds a repeat of 2, [9-12] new but staged after
	// it, [13-16] new and direct again, [17] the rest.
	var seq uint64
	for i := 1; i <= 17; i++ {
		if i == 6 {
			archive(t, js, mv("S0001", 2, payload{}), 1)
			continue
		}
		seq++
		archive(t, js, mv("S0001", seq, payload{}), 0)
	}
	m := NewMetrics()
	res := runSink(t, db, Options{Conn: nc, Batch: 4, FlushInterval: time.Hour, Metrics: m})
	if want := (Counts{Rows: 16, Repeats: 1}); len(res.Streams) != 1 || res.Streams[0].Counts != want || res.Streams[0].Position != 17 {
		t.Fatalf("result %+v, want position 17 with %+v", res.Streams, want)
	}
	if got := db.count(t, `SELECT count(*) FROM movements`); got != 16 {
		t.Errorf("movements holds %d rows, want 16", got)
	}
	if got := db.count(t, `SELECT count(*) FROM movement_repeats WHERE archive_seq = 6`); got != 1 {
		t.Errorf("the repeat is not in movement_repeats")
	}
	body := scrape(t, m)
	if got := metricValue(body, `rxedge_sink_staged_batches_total{archive="RX_ARCHIVE"}`); got != 2 {
		t.Errorf("%v batches staged, want 2 (the one holding the repeat and the one after it)", got)
	}
	if got := metricValue(body, `rxedge_sink_commits_total{archive="RX_ARCHIVE"}`); got != 5 {
		t.Errorf("%v commits, want 5 batches", got)
	}
}
