package sink

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// TestSinkSetsAsideWhatTheAgentRefuses runs the production configuration
// with an insider: central's administrator, whose grant here also lets it
// publish under the stores' subjects (a wider grant than the template's,
// as a head office's own tools may have), publishes movements of store
// S0001 dated year 0 and year 10000, which the agent's validation refuses
// (before 2000, past its clock), with a correct key, digest and Rx-Seq.
// The audit user's sink, run until caught up, writes the store's genuine
// movements, sets the insider's two aside in sink_rejects naming the
// field (payload occurred_at), counts them in the result, the position
// and rxedge_sink_rejects_total, logs them in one line, and goes on to the
// movement after them.
func TestSinkSetsAsideWhatTheAgentRefuses(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	var b bytes.Buffer
	if err := provision.CentralConfig(&b, []string{"S0001"}, 1); err != nil {
		t.Fatal(err)
	}
	const grant = `"$JS.API.STREAM.INFO.RX_MOVEMENTS"`
	conf := strings.Replace(b.String(), grant, `"rx.mv.>"`+"\n              "+grant, 1)
	if conf == b.String() {
		t.Fatal("the administrator's grant is not in the generated configuration")
	}
	path := filepath.Join(t.TempDir(), "central.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := natstest.StartHub(t, natstest.WithConfigFile(path, nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")))
	store := natstest.JetStream(t, natstest.Connect(t, srv.URL(), nats.UserInfo("S0001", "CHANGE-ME-S0001"), nats.CustomInboxPrefix("_INBOX_S0001")))
	admin := natstest.JetStream(t, natstest.Connect(t, srv.URL(), nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")))

	publish := func(who string, m central.Message) {
		t.Helper()
		js := store
		if who == "admin" {
			js = admin
		}
		if _, err := js.PublishMsg(testContext(t), m.Msg()); err != nil {
			t.Fatalf("%s publishes seq %d: %v", who, m.Seq, err)
		}
	}
	publish("store", mv("S0001", 1, payload{Type: "receive", Schedule: "CII", Quantity: "10"}))
	year0 := mv("S0001", 2, payload{MovementID: "insider-0", Schedule: "CII", Quantity: "10", OccurredAt: "0000-01-01T00:00:00Z"})
	year10000 := mv("S0001", 3, payload{MovementID: "insider-10000", Schedule: "CII", Quantity: "10", OccurredAt: "9999-12-31T23:30:00-01:00"})
	year10000.EnqueuedAt = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC) // a forged clock does not help
	publish("admin", year0)
	publish("admin", year10000)
	publish("store", mv("S0001", 4, payload{Type: "dispense", Schedule: "CII", Quantity: "3"}))

	audit := natstest.Connect(t, srv.URL(), nats.UserInfo("audit", "CHANGE-ME-audit"), nats.CustomInboxPrefix("_INBOX_audit"))
	ajs, err := jetstream.NewWithAPIPrefix(audit, central.AuditAPIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	waitArchived(t, ajs, central.ArchiveStreams(1), 4)
	var logs bytes.Buffer
	m := NewMetrics()
	res := runSink(t, db, Options{Conn: audit, APIPrefix: central.AuditAPIPrefix, Archives: central.ArchiveStreams(1),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m})
	want := Counts{Rows: 2, Rejects: 2}
	if len(res.Streams) != 1 || res.Streams[0].Counts != want || res.Streams[0].Position != 4 {
		t.Fatalf("result %+v, want one stream at position 4 with %+v", res.Streams, want)
	}
	for q, want := range map[string]int64{
		`SELECT count(*) FROM movements WHERE store_id = 'S0001'`:                                        2,
		`SELECT count(*) FROM movements WHERE movement_id LIKE 'insider-%'`:                              0,
		`SELECT count(*) FROM movements WHERE occurred_at < '2000-01-01' OR occurred_at >= '9999-01-01'`: 0,
		`SELECT count(*) FROM sink_rejects WHERE store_id = 'S0001' AND reason = 'payload occurred_at'`:  2,
		`SELECT count(*) FROM sink_rejects WHERE archive_seq IN (2, 3)`:                                  2,
		`SELECT rejects FROM sink_positions WHERE archive_stream = 'RX_ARCHIVE' AND last_seq = 4`:        2,
		`SELECT count(*) FROM controlled_balances WHERE store_id = 'S0001' AND balance = 7`:              1,
	} {
		if got := db.count(t, q); got != want {
			t.Errorf("%s: %d, want %d", q, got, want)
		}
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if line := `rxedge_sink_rejects_total{archive="RX_ARCHIVE",reason="payload occurred_at"} 2`; !strings.Contains(rec.Body.String(), line) {
		t.Errorf("the metrics lack %s", line)
	}
	if n := strings.Count(logs.String(), "set aside"); n != 1 || !strings.Contains(logs.String(), "payload occurred_at: 2") {
		t.Errorf("want one log line for the two rejects, got %d:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "insider") || strings.Contains(logs.String(), "9999") {
		t.Errorf("the log shows a payload's value:\n%s", logs.String())
	}
}
