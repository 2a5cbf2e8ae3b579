package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// sinkDB is a migrated sink database with movements of S0001: one with
// a prescription reference and a note carrying the patient marker.
func sinkDB(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	pg := pgtest.Start(t)
	name := fmt.Sprintf("console_%d", time.Now().UnixNano())
	pg.CreateDB(t, name)
	ctx := t.Context()
	c, err := pgx.Connect(ctx, pg.SuperURL(name))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := sink.Migrate(ctx, c); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		key := fmt.Sprintf("%032x", i)
		rx, note := any(nil), any(nil)
		if i == 2 {
			rx, note = "RX-"+patientMarker, "for "+patientMarker
		}
		_, err := c.Exec(ctx, `INSERT INTO movements (store_id, key, seq, digest, movement_id, type, ndc, quantity, unit, occurred_at, schedule, rx_ref, note, payload, archive_stream, archive_seq, archived_at)
			VALUES ('S0001', $1, $2, $3, $4, 'dispense', '12345-6789-01', 1, 'EA', $5, 'CII', $6, $7, $8, 'RX_ARCHIVE', $2, now())`,
			key, i, strings.Repeat("a", 64), fmt.Sprintf("M%d", i), time.Date(2026, 3, i, 9, 0, 0, 0, time.UTC), rx, note, `{"note":"`+patientMarker+`"}`)
		if err != nil {
			t.Fatal(err)
		}
	}
	pool, err := pgxpool.New(ctx, pg.SuperURL(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, pg.SuperURL(name)
}

// TestLookupsUseTheSinkIndexes: each lookup is served by one of the
// sink's indexes (its plan with sequential scans disabled names an index
// and no sequential scan), and finds what it should.
func TestLookupsUseTheSinkIndexes(t *testing.T) {
	pool, _ := sinkDB(t)
	ctx := t.Context()
	args := map[string][]any{"key": {"S0001", fmt.Sprintf("%032x", 2)}, "rx_ref": {"RX-x", 10}, "ndc": {"S0001", "12345-6789-01", 10}}
	for by, q := range console.SinkQueries {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx.Exec(ctx, "SET LOCAL enable_seqscan = off")
		rows, err := tx.Query(ctx, "EXPLAIN "+q, args[by]...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			rows.Scan(&line)
			plan = append(plan, line)
		}
		tx.Rollback(ctx)
		p := strings.Join(plan, "\n")
		if !strings.Contains(p, "Index") || strings.Contains(p, "Seq Scan") {
			t.Errorf("lookup by %s is not served by an index:\n%s", by, p)
		}
	}
	r := console.SinkRecords{Pool: pool}
	m, err := r.ByKey(ctx, "S0001", fmt.Sprintf("%032x", 2))
	if err != nil || m.Seq != 2 || m.MovementID != "M2" || m.Quantity != "1.000000" || m.Schedule != "CII" {
		t.Errorf("ByKey: %+v %v", m, err)
	}
	if _, err := r.ByKey(ctx, "S0002", fmt.Sprintf("%032x", 2)); err != console.ErrNoMovement {
		t.Errorf("ByKey of another store: %v, want ErrNoMovement", err)
	}
	if ms, err := r.ByRxRef(ctx, "RX-"+patientMarker, 10); err != nil || len(ms) != 1 || ms[0].Seq != 2 {
		t.Errorf("ByRxRef: %+v %v", ms, err)
	}
	if ms, err := r.ByNDC(ctx, "S0001", "12345-6789-01", 2); err != nil || len(ms) != 2 || ms[0].Seq != 3 || ms[1].Seq != 2 {
		t.Errorf("ByNDC, newest two: %+v %v", ms, err)
	}
}

// TestRecordsPages: an auditor looks a movement up by prescription
// reference and opens it; the reference, the note and the payload are
// shown nowhere, and the journal says a lookup was made, not what was
// looked for; a viewer or an operator cannot look.
func TestRecordsPages(t *testing.T) {
	pool, _ := sinkDB(t)
	hub := natstest.StartHub(t)
	h := startConsole(t, hub, ledgertest.OperatorSigner(t), nil, func(o *console.Options) { o.Records = console.SinkRecords{Pool: pool} })
	c, csrf := session(t, h, "alice@chain.example")
	code, page := post(t, h, "alice@chain.example", c, "/records", url.Values{"csrf": {csrf}, "by": {"rx_ref"}, "value": {"RX-" + patientMarker}}, nil)
	key := fmt.Sprintf("%032x", 2)
	if code != 200 || !strings.Contains(page, "/records/S0001/"+key) {
		t.Fatalf("lookup by rx_ref: %d\n%s", code, page)
	}
	code, mpage := get(t, h, "alice@chain.example", "", "/records/S0001/"+key)
	if code != 200 || !strings.Contains(mpage, "12345-6789-01") {
		t.Fatalf("movement page: %d\n%s", code, mpage)
	}
	for name, text := range map[string]string{"lookup": page, "movement": mpage, "log": h.logs.String()} {
		if strings.Contains(text, patientMarker) {
			t.Errorf("the %s carries the patient marker", name)
		}
	}
	for _, e := range journal(t, h) {
		if b, _ := json.Marshal(e); strings.Contains(string(b), patientMarker) {
			t.Errorf("journal entry carries the marker: %s", b)
		}
	}
	if j := journal(t, h); len(j) != 2 || j[0].Action != "lookup" || j[0].Detail != "by rx_ref" || j[1].Action != "movement" {
		t.Errorf("journal %+v, want the lookup and the movement read", j)
	}
	for _, user := range []string{"victor@chain.example", "olga@chain.example"} {
		if code, _ := get(t, h, user, "", "/records/S0001/"+key); code != 403 {
			t.Errorf("%s opening a movement: %d, want 403", user, code)
		}
	}
}

// TestProofDownload: an auditor downloads the inclusion proof of an
// archived movement, which checks offline against the store's key; a
// viewer cannot.
func TestProofDownload(t *testing.T) {
	hub := natstest.StartHub(t)
	nc := natstest.Connect(t, hub.URL())
	js := natstest.JetStream(t, nc)
	st := ledgertest.NewStore(t, "S0042")
	st.Movements(t.Context(), t, js, 10)
	st.Checkpoint(t.Context(), t, js)
	ledgertest.WaitArchived(t.Context(), t, js, central.ArchiveStreamName, 11)
	roster, err := provision.ParseRoster(strings.NewReader(st.RosterLine()))
	if err != nil {
		t.Fatal(err)
	}
	h := startConsole(t, hub, ledgertest.OperatorSigner(t), nil, func(o *console.Options) {
		o.Prover = console.AuditProver{Conn: nc, Roster: roster}
	})
	key := ledgertest.Key("S0042", 4)
	code, body := get(t, h, "alice@chain.example", "", "/records/S0042/"+key+"/proof")
	if code != 200 {
		t.Fatalf("proof: %d %s", code, body)
	}
	p, err := ledger.ParseProof([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ledger.CheckProof(p, st.VKey, ""); err != nil || res.Leaf.Seq != 5 || res.Checkpoint.Size != 10 {
		t.Errorf("the downloaded proof: %+v %v", res, err)
	}
	if code, _ := get(t, h, "victor@chain.example", "", "/records/S0042/"+key+"/proof"); code != 403 {
		t.Errorf("a viewer's proof: %d, want 403", code)
	}
}
