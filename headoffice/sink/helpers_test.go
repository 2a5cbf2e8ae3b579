package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// mv builds an archive message of store as an agent publishes it: the
// canonical payload, its key and digest.
func mv(store string, seq uint64, p payload) central.Message {
	p.StoreID = store
	if p.MovementID == "" {
		p.MovementID = fmt.Sprintf("m-%d", seq)
	}
	if p.Unit == "" {
		p.Unit = "EA"
	}
	if p.NDC == "" {
		p.NDC = "00002-3227-30"
	}
	if p.Quantity == "" {
		p.Quantity = "1"
	}
	if p.Type == "" {
		p.Type = "dispense"
	}
	if p.OccurredAt == "" {
		p.OccurredAt = time.Date(2026, 1, 1, 0, 0, int(seq), 0, time.UTC).Format(time.RFC3339)
	}
	data, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	k := sha256.Sum256([]byte(store + "\x00" + p.MovementID))
	d := sha256.Sum256(data)
	return central.Message{Store: store, Key: hex.EncodeToString(k[:16]), Digest: hex.EncodeToString(d[:]),
		Seq: seq, EnqueuedAt: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), Payload: data}
}

// testDB is a migrated database of its own on a test server.
type testDB struct {
	pg   *pgtest.Server
	name string
	url  string
}

func newDB(tb testing.TB, pg *pgtest.Server) *testDB {
	tb.Helper()
	name := fmt.Sprintf("sink_%d", time.Now().UnixNano())
	pg.CreateDB(tb, name)
	db := &testDB{pg: pg, name: name, url: pg.SuperURL(name)}
	c := db.conn(tb)
	if _, err := Migrate(testContext(tb), c); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return db
}

func (db *testDB) conn(tb testing.TB) *pgx.Conn {
	tb.Helper()
	ctx := testContext(tb)
	c, err := pgx.Connect(ctx, db.url)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func (db *testDB) pool(tb testing.TB) *pgxpool.Config {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

func (db *testDB) count(tb testing.TB, sql string, args ...any) int64 {
	tb.Helper()
	var n int64
	if err := db.conn(tb).QueryRow(testContext(tb), sql, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
	return n
}

func testContext(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// archiveHub is a server with a plain stream named RX_ARCHIVE on the
// archive's subjects, which a test publishes into directly: repeats,
// conflicts and malformed messages that central's sourcing would make
// only past its horizon or through a hostile store.
func archiveHub(tb testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := js.CreateStream(testContext(tb), jetstream.StreamConfig{Name: central.ArchiveStreamName,
		Subjects: []string{central.ArchivePrefix + ">"}, Storage: jetstream.FileStorage}); err != nil {
		tb.Fatal(err)
	}
	return nc, js
}

// archive publishes m straight into the archive under its store's
// subject; copy makes its Nats-Msg-Id differ from an earlier copy's, as
// an agent's resend past central's horizon arrives in the archive. A copy
// is in the full form, as an agent of an earlier version sent it (whose
// Rx-Digest leaves the id's tail free to differ); the first is compact.
func archive(tb testing.TB, js jetstream.JetStream, m central.Message, copy int) {
	tb.Helper()
	msg := m.Msg()
	if copy > 0 {
		msg = natstest.FullForm(m, "")
		msg.Header.Set(central.HeaderMsgID, msg.Header.Get(central.HeaderMsgID)+fmt.Sprintf("-%d", copy))
	}
	msg.Subject = central.ArchiveSubject(m.Store)
	msg.Header.Del(central.HeaderExpectLast)
	if _, err := js.PublishMsg(testContext(tb), msg); err != nil {
		tb.Fatalf("archive: %v", err)
	}
}
