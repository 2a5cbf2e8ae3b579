package sink

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

func runSink(t *testing.T, db *testDB, o Options) Result {
	t.Helper()
	o.Postgres, o.UntilCaughtUp = db.pool(t), true
	res, err := Run(testContext(t), o)
	if err != nil {
		t.Fatalf("sink: %v", err)
	}
	return res
}

// TestSinkOutcomes archives movements, a repeat, a conflict and malformed
// messages, and finds each in its one table, the position at the
// archive's last sequence, nothing written twice by a second run, and the
// kept row of a conflicting key unchanged.
func TestSinkOutcomes(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())

	a := mv("S0001", 1, payload{Type: "receive", Quantity: "100", Schedule: "CII", DEAForm222: "X12345678"})
	b := mv("S0001", 2, payload{Type: "dispense", Quantity: "5", Schedule: "CII", RxRef: "RX-1"})
	bOther := mv("S0001", 3, payload{MovementID: "m-2", Type: "dispense", Quantity: "7", Schedule: "CII", RxRef: "RX-1"})
	c := mv("S0002", 1, payload{Type: "receive", Quantity: "2.5", Unit: "ML"})
	archive(t, js, a, 0)
	archive(t, js, b, 0)
	archive(t, js, a, 1)      // a repeat: same key, same digest
	archive(t, js, bOther, 0) // a conflict: b's key, another digest
	archive(t, js, c, 0)
	bad := mv("S0002", 2, payload{})
	bad.Digest = fmt.Sprintf("%064x", 1)
	archive(t, js, bad, 0) // digest does not match the payload
	unknown := mv("S0002", 3, payload{})
	unknown.Payload = []byte(`{"movement_id":"m-3","store_id":"S0002","patient":"x"}`)
	unknown.Digest = fmt.Sprintf("%x", sha256.Sum256(unknown.Payload))
	archive(t, js, unknown, 0)
	forged := mv("S0001", 4, payload{})
	forged.Store = "S0003" // published under S0003's subject, naming S0001 inside
	msg := forged.Msg()
	msg.Subject = central.ArchiveSubject("S0003")
	msg.Header.Set(central.HeaderStore, "S0001")
	if _, err := js.PublishMsg(testContext(t), msg); err != nil {
		t.Fatal(err)
	}

	res := runSink(t, db, Options{Conn: nc, Batch: 3})
	want := Counts{Rows: 3, Repeats: 1, Conflicts: 1, Rejects: 3}
	if len(res.Streams) != 1 || res.Streams[0].Counts != want || res.Streams[0].Position != 8 {
		t.Fatalf("result %+v, want one stream at position 8 with %+v", res.Streams, want)
	}
	check := func() {
		t.Helper()
		for q, want := range map[string]int64{
			`SELECT count(*) FROM movements`:                                                           3,
			`SELECT count(*) FROM movement_repeats WHERE archive_seq = 3`:                              1,
			`SELECT count(*) FROM movement_conflicts WHERE archive_seq = 4`:                            1,
			`SELECT count(*) FROM sink_rejects`:                                                        3,
			`SELECT count(*) FROM sink_rejects WHERE reason = 'payload digest'`:                        1,
			`SELECT count(*) FROM sink_rejects WHERE reason = 'payload json'`:                          1,
			`SELECT count(*) FROM sink_rejects WHERE reason = 'header Rx-Store'`:                       1,
			`SELECT last_seq FROM sink_positions WHERE archive_stream = 'RX_ARCHIVE'`:                  8,
			`SELECT rows + repeats + conflicts + rejects FROM sink_positions`:                          8,
			`SELECT count(*) FROM movements WHERE key = '` + b.Key + `' AND quantity = 5`:              1,
			`SELECT count(*) FROM movements WHERE digest = '` + bOther.Digest + `'`:                    0,
			`SELECT count(*) FROM movement_conflicts WHERE kept_digest = '` + b.Digest + `'`:           1,
			`SELECT count(*) FROM movements WHERE store_id = 'S0002' AND quantity = 2.5`:               1,
			`SELECT count(*) FROM movements WHERE dea_form_222 = 'X12345678' AND seq = 1`:              1,
			`SELECT count(*) FROM sink_rejects WHERE reason LIKE '%patient%' OR reason LIKE '%X1234%'`: 0,
		} {
			if got := db.count(t, q); got != want {
				t.Errorf("%s = %d, want %d", q, got, want)
			}
		}
	}
	check()

	// A second run finds everything written: nothing moves.
	res = runSink(t, db, Options{Conn: nc})
	if res.Streams[0].Counts != (Counts{}) || res.Streams[0].Position != 8 {
		t.Fatalf("second run %+v, want nothing written", res.Streams)
	}
	check()

	v, err := Verify(testContext(t), db.conn(t), VerifyOptions{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() {
		t.Fatalf("verify: %+v", v)
	}

	// A row the sink did not write, and verification says so.
	if _, err := db.conn(t).Exec(testContext(t), `UPDATE movements SET digest = $1 WHERE key = $2`, fmt.Sprintf("%064x", 7), c.Key); err != nil {
		t.Fatal(err)
	}
	v, err = Verify(testContext(t), db.conn(t), VerifyOptions{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	if v.OK() || v.Streams[0].Different != 1 || v.PayloadMismatches != 1 {
		t.Fatalf("verify after a changed digest: %+v, want one difference and one payload mismatch", v)
	}

	// The row of the archive's last message gone: verification reports it
	// missing and returns, though no message follows the one without a row.
	if _, err := db.conn(t).Exec(testContext(t), `DELETE FROM sink_rejects WHERE archive_seq = 8`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err = Verify(ctx, db.conn(t), VerifyOptions{Conn: nc})
	if err != nil {
		t.Fatalf("verify without the last message's row: %v", err)
	}
	if v.OK() || v.Streams[0].Missing != 1 {
		t.Fatalf("verify without the last message's row: %+v, want one missing", v)
	}
}

// TestSinkPartitions runs central's own sourcing into two partitions'
// archives and finds every movement once, each archive's position at its
// last sequence.
func TestSinkPartitions(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	const n = 2
	srv := natstest.StartHub(t, natstest.WithStream(central.StreamOptions{Partitions: n}))
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	ctx := testContext(t)
	const stores, per = 12, 50
	for s := range stores {
		store := fmt.Sprintf("S%04d", s+1)
		p := central.Partition(store, n)
		for i := 1; i <= per; i++ {
			m := mv(store, uint64(i), payload{})
			msg := m.Msg()
			msg.Subject = central.PartitionSubject(p, n, store, m.Key)
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitArchived(t, js, central.ArchiveStreams(n), stores*per)
	res := runSink(t, db, Options{Conn: nc, Archives: central.ArchiveStreams(n), Batch: 64})
	var total uint64
	for _, s := range res.Streams {
		total += s.Rows
		st, err := js.Stream(ctx, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		if last := st.CachedInfo().State.LastSeq; s.Position != last {
			t.Errorf("%s: position %d, archive's last sequence %d", s.Name, s.Position, last)
		}
	}
	if total != stores*per || db.count(t, `SELECT count(*) FROM movements`) != stores*per {
		t.Fatalf("rows written %d, want %d", total, stores*per)
	}
	v, err := Verify(ctx, db.conn(t), VerifyOptions{Conn: nc, Archives: central.ArchiveStreams(n)})
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() || len(v.Stores) != stores {
		t.Fatalf("verify: %+v", v)
	}
	for _, s := range v.Stores {
		if s.Archived != per || s.HighestArchived != per || s.HighestInDB != per {
			t.Errorf("store %+v, want %d archived up to sequence %d", s, per, per)
		}
	}
}

// waitArchived polls the archives until they hold want messages in all
// (awaited: central's sourcing copying them).
func waitArchived(t testing.TB, js jetstream.JetStream, names []string, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var got uint64
		for _, name := range names {
			st, err := js.Stream(testContext(t), name)
			if err != nil {
				continue
			}
			got += st.CachedInfo().State.Msgs
		}
		if got >= uint64(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("archives hold %d messages after 60 s, want %d (awaited: the sourcing)", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
