package sink

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// recreateArchive deletes the archive stream and creates it again, empty,
// as central's administrator can.
func recreateArchive(t *testing.T, srvURL string) {
	t.Helper()
	_, js := archiveHub(t, srvURL) // a connection of its own; the stream exists
	if err := js.DeleteStream(testContext(t), central.ArchiveStreamName); err != nil {
		t.Fatal(err)
	}
	archiveHub(t, srvURL)
}

// TestSinkReadsARecreatedArchiveFromItsStart copies an archive, then
// central's administrator deletes and recreates it: first shorter than
// the sink's position (a movement already copied, a new one, a repeat at
// a sequence where the earlier stream had a repeat, another new one),
// then longer (seven new ones). The sink finds each recreation by the
// stream's creation time, records the new stream's rows under a name of
// its own (the earlier rows stay), and copies every new movement (none
// skipped, each key once); the recreation is counted
// (rxedge_sink_archive_recreated_total), in the run's result, and in
// Verify's report, which finds the database and the archive agreeing.
func TestSinkReadsARecreatedArchiveFromItsStart(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())
	m := func(i uint64) central.Message { return mv("S0001", i, payload{}) }
	for _, x := range []struct {
		i    uint64
		copy int
	}{{1, 0}, {2, 0}, {1, 1}, {3, 0}, {4, 0}} {
		archive(t, js, m(x.i), x.copy)
	}
	if res := runSink(t, db, Options{Conn: nc}); res.Streams[0].Position != 5 || res.Streams[0].Rows != 4 || res.Streams[0].Repeats != 1 {
		t.Fatalf("first run: %+v", res.Streams)
	}

	recreateArchive(t, srv.URL())
	archive(t, js, m(1), 0) // copied already
	archive(t, js, m(5), 0)
	archive(t, js, m(1), 1) // a repeat at sequence 3, as in the earlier stream
	archive(t, js, m(6), 0)
	metrics := NewMetrics()
	res := runSink(t, db, Options{Conn: nc, Metrics: metrics})
	st := res.Streams[0]
	if st.Recreated == "" || st.Position != 4 || st.Rows != 2 || st.Repeats != 2 {
		t.Errorf("run after a recreation shorter than the position: %+v, want it found, position 4, 2 rows and 2 repeats", st)
	}
	if n := db.count(t, `SELECT count(*) FROM movements`); n != 6 {
		t.Errorf("%d movements after the shorter recreation, want 6 (none skipped)", n)
	}

	recreateArchive(t, srv.URL())
	for i := uint64(7); i <= 13; i++ {
		archive(t, js, m(i), 0)
	}
	res = runSink(t, db, Options{Conn: nc, Metrics: metrics})
	if st := res.Streams[0]; st.Recreated == "" || st.Position != 7 || st.Rows != 7 {
		t.Errorf("run after a recreation longer than the position: %+v, want it found, position 7 and 7 rows", st)
	}
	if n, keys := db.count(t, `SELECT count(*) FROM movements`), db.count(t, `SELECT count(DISTINCT key) FROM movements`); n != 13 || keys != 13 {
		t.Errorf("%d movements of %d keys after the longer recreation, want 13 of 13", n, keys)
	}
	if n := recreations(t, metrics); n != 2 {
		t.Errorf("rxedge_sink_archive_recreated_total %v, want 2", n)
	}
	if n := db.count(t, `SELECT recreated FROM sink_positions WHERE archive_stream = $1`, central.ArchiveStreamName); n != 2 {
		t.Errorf("sink_positions.recreated %d, want 2", n)
	}

	v, err := Verify(testContext(t), db.conn(t), VerifyOptions{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := v.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !v.OK() || len(v.Streams[0].Earlier) != 2 || !strings.Contains(text.String(), "created again 2 time(s)") {
		t.Errorf("verify after two recreations: ok %v, earlier %v; report:\n%s", v.OK(), v.Streams[0].Earlier, text.String())
	}
}

// recreations is rxedge_sink_archive_recreated_total of the archive.
func recreations(t *testing.T, m *Metrics) float64 {
	t.Helper()
	fams, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "rxedge_sink_archive_recreated_total" {
			for _, s := range f.GetMetric() {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestSinkFollowingFindsARecreatedArchive recreates the archive while
// the sink follows it, shorter than its position: the sink's look at the
// stream finds the new creation time, starts its session again and
// copies the new stream's movements, none skipped.
func TestSinkFollowingFindsARecreatedArchive(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())
	m := func(i uint64) central.Message { return mv("S0001", i, payload{}) }
	for i := uint64(1); i <= 4; i++ {
		archive(t, js, m(i), 0)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	metrics := NewMetrics()
	go func() {
		_, err := Run(ctx, Options{Conn: nc, Postgres: db.pool(t), Metrics: metrics, FlushInterval: 10 * time.Millisecond})
		done <- err
	}()
	defer func() {
		cancel()
		<-done
	}()
	conn := db.conn(t)
	awaitRows := func(what string, n int64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			var got int64
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM movements`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not within a minute: %s (%d movements of %d)", what, got, n)
			}
			time.Sleep(50 * time.Millisecond) // polled: the rows another goroutine commits
		}
	}
	awaitRows("the sink copies the first stream", 4)
	recreateArchive(t, srv.URL())
	archive(t, js, m(5), 0)
	archive(t, js, m(6), 0)
	awaitRows("the sink copies the recreated stream's two movements", 6)
	if n := recreations(t, metrics); n != 1 {
		t.Errorf("rxedge_sink_archive_recreated_total %v, want 1", n)
	}
}
