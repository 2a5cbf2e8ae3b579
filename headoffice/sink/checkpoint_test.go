package sink

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// TestSinkPassesOverCheckpoints: a store's checkpoints in the archive
// (central/ledger) are neither rows nor rejects; the position moves past
// them, they are counted as checkpoints, and verification finds nothing
// missing or different.
func TestSinkPassesOverCheckpoints(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())
	cp := func(size int64) {
		t.Helper()
		m := nats.NewMsg(central.ArchiveSubject("S0001"))
		m.Data = []byte(fmt.Sprintf(`{"note":"checkpoint %d","prev_size":0}`, size))
		m.Header.Set(central.HeaderMsgID, ledger.CheckpointMsgID(ledger.CheckpointToken("0123456789abcdef", size), m.Data))
		m.Header.Set(central.HeaderStore, "S0001")
		m.Header.Set(central.HeaderSeq, fmt.Sprint(size))
		if _, err := js.PublishMsg(testContext(t), m); err != nil {
			t.Fatal(err)
		}
	}
	cp(1) // first in the stream
	archive(t, js, mv("S0001", 1, payload{}), 0)
	archive(t, js, mv("S0001", 2, payload{}), 0)
	cp(2)
	archive(t, js, mv("S0001", 3, payload{}), 0)
	cp(3) // last in the stream

	res := runSink(t, db, Options{Conn: nc, Batch: 2})
	want := Counts{Rows: 3, Checkpoints: 3}
	if len(res.Streams) != 1 || res.Streams[0].Counts != want || res.Streams[0].Position != 6 {
		t.Fatalf("result %+v, want one stream at position 6 with %+v", res.Streams, want)
	}
	for q, want := range map[string]int64{
		`SELECT count(*) FROM movements`:                                                3,
		`SELECT count(*) FROM sink_rejects`:                                             0,
		`SELECT rows + repeats + conflicts + rejects + checkpoints FROM sink_positions`: 6,
		`SELECT checkpoints FROM sink_positions`:                                        3,
	} {
		if got := db.count(t, q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
	v, err := Verify(testContext(t), db.conn(t), VerifyOptions{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() || v.Streams[0].Missing != 0 {
		t.Fatalf("verify with checkpoints in the archive: %+v", v)
	}
}
