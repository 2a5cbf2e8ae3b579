package sink

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// TestCanonicalNDCInSQL holds the migration's rx_canonical_ndc to
// movement.CanonicalNDC over every spelling of thousands of NDCs and as
// many strings of digits and hyphens that are none: the same canonical
// form, or NULL where Go refuses.
func TestCanonicalNDCInSQL(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	r := rand.New(rand.NewPCG(33, 1))
	var in []string
	for range 3000 {
		c := fmt.Sprintf("%05d-%04d-%02d", r.IntN(100000), r.IntN(10000), r.IntN(100))
		if r.IntN(4) == 0 { // zeros where the short groups are padded
			c = fmt.Sprintf("0%04d-0%03d-0%d", r.IntN(10000), r.IntN(1000), r.IntN(10))
		}
		in = append(in, movement.NDCSpellings(c)...)
		b := make([]byte, r.IntN(15))
		for i := range b {
			b[i] = "0123456789-x"[r.IntN(12)]
		}
		in = append(in, string(b))
	}
	in = append(in, "", "-", "--", "0591054001", "00591-0540-01\n", " 00591-0540-01", "00591-0540-01 ", "٠٠٥٩١-٠٥٤٠-٠١")
	rows, err := db.conn(t).Query(testContext(t), `SELECT s, rx_canonical_ndc(s) FROM unnest($1::text[]) s`, in)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var s string
		var got *string
		if err := rows.Scan(&s, &got); err != nil {
			t.Fatal(err)
		}
		n++
		want, err := movement.CanonicalNDC(s)
		switch {
		case err != nil && got != nil:
			t.Errorf("rx_canonical_ndc(%q) = %q, Go refuses it (%v)", s, *got, err)
		case err == nil && (got == nil || *got != want):
			t.Errorf("rx_canonical_ndc(%q) = %v, Go says %q", s, got, want)
		}
	}
	if rows.Err() != nil || n != len(in) {
		t.Fatalf("%d of %d compared: %v", n, len(in), rows.Err())
	}
}

// TestDues checks the due dates of a theft or loss: the next business
// day around weekends and observed federal holidays, 45 days for Form
// 106, 14 and 30 for California.
func TestDues(t *testing.T) {
	d := func(s string) time.Time { v, _ := time.Parse(time.DateOnly, s); return v }
	for _, c := range []struct{ at, next string }{
		{"2026-03-02", "2026-03-03"}, // Monday → Tuesday
		{"2026-03-06", "2026-03-09"}, // Friday → Monday
		{"2026-07-02", "2026-07-06"}, // 4 July is a Saturday: observed Friday 3
		{"2026-12-31", "2027-01-04"}, // a Thursday; 1 January, a Friday, is a holiday
		{"2027-12-30", "2028-01-03"}, // 1 January 2028 a Saturday: observed Friday 31 December
		{"2026-11-25", "2026-11-27"}, // Thanksgiving, 26 November
		{"2026-01-16", "2026-01-20"}, // Friday; Monday 19 is Martin Luther King Jr. Day
		{"2026-06-18", "2026-06-22"}, // Juneteenth, a Friday
		{"2026-05-22", "2026-05-26"}, // Memorial Day, 25 May
		{"2026-10-09", "2026-10-13"}, // Columbus Day, 12 October
		{"2026-11-10", "2026-11-12"}, // Veterans Day, a Wednesday
	} {
		if got := NextBusinessDay(d(c.at)).Format(time.DateOnly); got != c.next {
			t.Errorf("the business day after %s: %s, want %s", c.at, got, c.next)
		}
	}
	at := time.Date(2026, 3, 6, 23, 30, 0, 0, time.UTC)
	theft, loss := DuesOf(at, "theft"), DuesOf(at, "loss")
	if theft.Form106 != d("2026-04-20") || theft.California != d("2026-03-20") || loss.California != d("2026-04-05") || theft.WrittenNotice != d("2026-03-09") {
		t.Errorf("dues: theft %+v, loss %+v", theft, loss)
	}
	from, to, err := QuarterBounds("2026Q4")
	if err != nil || from != d("2026-10-01") || to != d("2027-01-01") {
		t.Errorf("2026Q4: %v %v %v", from, to, err)
	}
	for _, bad := range []string{"2026Q5", "2026", "26Q1", "2026q1x", ""} {
		if _, _, err := QuarterBounds(bad); err == nil {
			t.Errorf("QuarterBounds(%q) accepted", bad)
		}
	}
}

// TestMigrationGroupsArchivedRowsWithNewOnes holds a database at schema
// 3 with rows a sink wrote before NDCs were canonical (ndc as the store
// sent it, in three spellings of one product and in another unit), then
// migrates it: the rows keep their payloads and digests, their ndc is the
// canonical one (what was sent in ndc_as_sent), and the movements sunk
// after the migration, old agents' and new, are one product with them:
// one balance, found by any spelling, the other unit flagged.
func TestMigrationGroupsArchivedRowsWithNewOnes(t *testing.T) {
	pg := pgtest.Start(t)
	name := fmt.Sprintf("sink_%d", time.Now().UnixNano())
	pg.CreateDB(t, name)
	db := &testDB{pg: pg, name: name, url: pg.SuperURL(name)}
	conn := db.conn(t)
	ctx := testContext(t)
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	conn.Exec(ctx, `CREATE TABLE sink_schema (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
	for _, m := range ms[:3] {
		if _, err := conn.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		conn.Exec(ctx, `INSERT INTO sink_schema (version, name) VALUES ($1, $2)`, m.Version, m.Name)
	}
	// What the sink of schema 3 wrote: the payload's fields as they are.
	old := []struct{ ndc, typ, qty, unit string }{
		{"00591-0540-01", "receive", "100", "EA"}, {"00591054001", "dispense", "10", "EA"},
		{"0591-0540-01", "dispense", "5", "EA"}, {"0591-0540-01", "adjust", "1", "EA"}, {"00591-540-01", "receive", "3", "ML"},
	}
	for i, o := range old {
		m := mv("S0001", uint64(i+1), payload{NDC: o.ndc, Type: o.typ, Quantity: o.qty, Unit: o.unit, Schedule: "CII"})
		if _, err := conn.Exec(ctx, `INSERT INTO movements (store_id, key, seq, digest, movement_id, type, ndc, quantity, unit,
			occurred_at, schedule, payload, archive_stream, archive_seq, archived_at)
			VALUES ('S0001', $1, $2, $3, $4, $5, $6, $7, $8, $9, 'CII', $10, 'OLD', $2, now())`,
			m.Key, int64(m.Seq), m.Digest, fmt.Sprintf("m-%d", m.Seq), o.typ, o.ndc, o.qty, o.unit,
			time.Date(2026, 1, 1, 0, 0, i+1, 0, time.UTC), string(m.Payload)); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := Migrate(ctx, conn); err != nil || len(v) == 0 || v[0] != 4 {
		t.Fatalf("migrate: %v %v", v, err)
	}
	var ndcs, sent string
	conn.QueryRow(ctx, `SELECT string_agg(ndc, ','  ORDER BY seq), string_agg(coalesce(ndc_as_sent, '-'), ',' ORDER BY seq) FROM movements`).Scan(&ndcs, &sent)
	if ndcs != "00591-0540-01,00591-0540-01,00591-0540-01,00591-0540-01,00591-0540-01" || sent != "-,00591054001,0591-0540-01,0591-0540-01,00591-540-01" {
		t.Fatalf("after the migration: ndc %s, ndc_as_sent %s", ndcs, sent)
	}
	if n := db.count(t, `SELECT count(*) FROM movements WHERE encode(sha256(convert_to(payload, 'UTF8')), 'hex') <> digest`); n != 0 {
		t.Fatalf("%d payloads no longer match their digests", n)
	}
	// After it: an old agent's dispense (ndc as sent) and a new agent's.
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())
	archive(t, js, mv("S0001", 6, payload{NDC: "0591-0540-01", Type: "dispense", Quantity: "7", Schedule: "CII"}), 0)
	archive(t, js, mv("S0001", 7, payload{NDC: "00591-0540-01", NDCAsSent: "0591054001", Type: "adjust_out", Reason: "theft", Quantity: "2", Schedule: "CII"}), 0)
	runSink(t, db, Options{Conn: nc})
	for _, spelling := range []string{"00591-0540-01", "00591054001", "0591-0540-01", "00591-540-01", "00591-0540-1"} {
		tab, err := Report(ctx, conn, ReportQuery{Kind: ReportBalances, NDC: spelling})
		if err != nil {
			t.Fatal(err)
		}
		if len(tab.Rows) != 2 || tab.Rows[0][2] != "EA" || tab.Rows[0][4] != "77.000000" || tab.Rows[0][15] != "true" ||
			tab.Rows[1][2] != "ML" || tab.Rows[1][15] != "true" {
			t.Errorf("balances of %s: %v", spelling, tab.Rows)
		}
	}
	tab, err := Report(ctx, conn, ReportQuery{Kind: ReportUnits})
	if err != nil || len(tab.Rows) != 2 {
		t.Errorf("units: %v %v", tab, err)
	}
	if _, err := Report(ctx, conn, ReportQuery{Kind: ReportBalances, NDC: "not-an-ndc"}); err == nil {
		t.Error("a report took an --ndc that is no NDC")
	}
}
