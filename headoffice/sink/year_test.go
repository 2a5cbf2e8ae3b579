package sink

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// yearProduct is one product of the year, with the spellings its NDC is
// sent in.
type yearProduct struct {
	ndc, schedule, unit string
	spellings           []string
}

// The year's products: two Schedule II (one in each, one in mL), one
// Schedule IV, each sent in several spellings.
var yearProducts = []yearProduct{
	{"00591-0540-01", "CII", "EA", []string{"00591-0540-01", "00591054001", "0591-0540-01"}},
	{"00054-0237-25", "CII", "ML", []string{"00054-0237-25", "0054-0237-25", "00054023725"}},
	{"00093-0058-01", "CIV", "EA", []string{"00093-0058-01", "0093-0058-01", "00093-058-01"}},
}

// yearGen makes a store's year: the shelf (what is really there) and the
// book (what the movements say) kept apart, so that counts find what the
// book does not know.
type yearGen struct {
	r           *rand.Rand
	at          time.Time
	all         []payload
	shelf, book map[string]int64 // thousandths
}

func (g *yearGen) add(p payload, when time.Time) {
	prod := yearProducts[slices.IndexFunc(yearProducts, func(x yearProduct) bool { return x.ndc == p.NDC })]
	p.Schedule, p.Unit = prod.schedule, prod.unit
	p.NDC = prod.spellings[g.r.IntN(len(prod.spellings))]
	if g.at = g.at.Add(time.Minute); g.at.Before(when) {
		g.at = when
	}
	p.OccurredAt = g.at.Format(time.RFC3339)
	p.MovementID = fmt.Sprintf("Y-%d", len(g.all)+1)
	p.StoreID = "S0001"
	if err := p.Validate("S0001", g.at); err != nil { // canonical, as the agent stores it
		panic(fmt.Sprint(p, err))
	}
	g.all = append(g.all, p)
}

func (g *yearGen) move(ndc, typ string, q int64, when time.Time, reason string) {
	if q <= 0 {
		return
	}
	g.add(payload{NDC: ndc, Type: typ, Quantity: milli(q).String(), Reason: reason}, when)
	switch typ {
	case "receive", "return", "transfer_in", "adjust_in":
		g.book[ndc] += q
		if reason != "count_correction" {
			g.shelf[ndc] += q
		}
	case "dispense", "waste", "transfer_out", "adjust_out":
		g.book[ndc] -= q
		if reason != "count_correction" && reason != "theft" && reason != "loss" {
			g.shelf[ndc] -= q // a theft or loss is found gone: the shelf lost it before
		}
	}
}

// count counts the shelf and, most times, corrects the book to it.
func (g *yearGen) count(ndc, kind, method string, when time.Time) {
	g.add(payload{NDC: ndc, Type: "count", Quantity: milli(g.shelf[ndc]).String(), CountKind: kind, CountMethod: method}, when)
	switch d := g.shelf[ndc] - g.book[ndc]; {
	case d == 0 || g.r.IntN(4) == 0: // left for the next count to find again
	case d > 0:
		g.move(ndc, "adjust_in", d, when, "count_correction")
	default:
		g.move(ndc, "adjust_out", -d, when, "count_correction")
	}
}

// day is one day of trade, hidden shrinkage and surplus included.
func (g *yearGen) day(d time.Time) {
	for _, p := range yearProducts {
		open := d.Add(9 * time.Hour)
		if d.Weekday() == time.Monday || g.shelf[p.ndc] < 40000 {
			g.move(p.ndc, "receive", int64(200+g.r.IntN(300))*1000, open, "")
		}
		for range g.r.IntN(4) {
			q := int64(1+g.r.IntN(30))*1000 + int64(g.r.IntN(2))*500
			g.move(p.ndc, "dispense", min(q, g.shelf[p.ndc]), open, "")
		}
		switch k := g.r.IntN(100); {
		case k < 4:
			g.move(p.ndc, "return", int64(1+g.r.IntN(10))*1000, open, "")
		case k < 6:
			g.move(p.ndc, "waste", int64(1+g.r.IntN(3))*1000, open, []string{"", "expired", "damaged"}[g.r.IntN(3)])
		case k < 8:
			g.move(p.ndc, "transfer_out", int64(1+g.r.IntN(20))*1000, open, "")
		case k < 9:
			g.move(p.ndc, "transfer_in", int64(1+g.r.IntN(20))*1000, open, "")
		case k < 10:
			g.move(p.ndc, "adjust_out", int64(1+g.r.IntN(3))*1000, open, "damaged")
		case k < 13:
			g.shelf[p.ndc] -= int64(1 + g.r.IntN(5000)) // unrecorded shrinkage
		case k < 14:
			g.shelf[p.ndc] += int64(1 + g.r.IntN(3000)) // found: put back unrecorded
		}
	}
}

// theYear is the year generated: a whole one before the test's clock, so
// the sink takes every movement (none is in the future).
const theYear = 2025

// year generates 2025 for S0001: trade every day; a cycle count of the
// Schedule IV product mid-month (estimated in odd months); quarterly
// counts of the Schedule II products; the biennial inventory on 1 May; a
// theft discovered on Thursday 3 July (4 July a Friday: the written
// notice is due Monday 7 July) and a loss discovered on Wednesday 26
// November (Thanksgiving the 27th: due Friday 28th).
func year(seed uint64) *yearGen {
	g := &yearGen{r: rand.New(rand.NewPCG(seed, 33)), shelf: map[string]int64{}, book: map[string]int64{}}
	a, b, c := yearProducts[0].ndc, yearProducts[1].ndc, yearProducts[2].ndc
	for d := time.Date(theYear, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() == theYear; d = d.AddDate(0, 0, 1) {
		g.day(d)
		evening := d.Add(20 * time.Hour)
		switch {
		case d.Month() == time.June && d.Day() == 20:
			g.shelf[a] -= 12000 // stolen; found on 3 July
		case d.Month() == time.July && d.Day() == 3:
			g.move(a, "adjust_out", 12000, evening, "theft")
		case d.Month() == time.November && d.Day() == 10:
			g.shelf[b] -= 5500 // lost; found on 26 November
		case d.Month() == time.November && d.Day() == 26:
			g.move(b, "adjust_out", 5500, evening, "loss")
		case d.Month() == time.May && d.Day() == 1:
			for _, p := range yearProducts {
				g.count(p.ndc, "biennial", "exact", evening)
			}
		case d.Day() == 15:
			g.count(c, "cycle", []string{"exact", "estimated"}[int(d.Month())%2], evening)
		}
		if next := d.AddDate(0, 0, 1); next.Day() == 1 && next.Month()%3 == 1 {
			g.count(a, "quarterly", "exact", evening)
			g.count(b, "quarterly", "exact", evening)
		}
	}
	return g
}

// TestInventoryYear sinks a generated year of one store's history (every
// kind of movement, NDCs in several spellings, counts that find the shelf
// short and over, count corrections both ways, a theft and a loss) and
// checks the views against an oracle written here from the movements
// alone: every count's book balance, variance and movements since the
// previous count; the 1715.65 reconciliation of each quarter; the Form
// 106 drafts and their due dates; and every running balance.
func TestInventoryYear(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())
	g := year(1)
	for i, p := range g.all {
		archive(t, js, mv("S0001", uint64(i+1), p), 0)
	}
	runSink(t, db, Options{Conn: nc, Batch: 500})
	o := newOracle(g.all)
	if len(o.counts) < 20 || o.corrections[0] == 0 || o.corrections[1] == 0 {
		t.Fatalf("the year holds too little to check: %d counts, corrections in and out %v", len(o.counts), o.corrections)
	}
	conn := db.conn(t)
	ctx := testContext(t)
	checkCounts(t, ctx, conn, o)
	checkReconciliation(t, ctx, conn, o)
	checkForm106(t, ctx, conn)
	checkRunning(t, ctx, conn, o)
}

// oracleCount is what the oracle expects of one count.
type oracleCount struct {
	p                         payload
	book, counted             *big.Rat
	prevAt                    string
	prev                      *big.Rat // nil: no previous count
	since                     map[string]*big.Rat
	movements                 int
	expected                  *big.Rat
	recVariance, bookVariance *big.Rat
	recPercent, bookPercent   string // "" when undefined
}

type yearOracle struct {
	counts      map[string]*oracleCount // by movement_id
	running     map[string]*big.Rat     // movement_id → book after it
	corrections [2]int                  // in, out
}

// newOracle reads the movements in the order they occurred (the
// generator's order) and keeps, per product, the book and what moved
// since its last count.
func newOracle(all []payload) *yearOracle {
	sign := map[string]int64{"receive": 1, "return": 1, "transfer_in": 1, "adjust_in": 1, "adjust": 1,
		"dispense": -1, "waste": -1, "transfer_out": -1, "adjust_out": -1}
	o := &yearOracle{counts: map[string]*oracleCount{}, running: map[string]*big.Rat{}}
	book := map[string]*big.Rat{}
	since := map[string]map[string]*big.Rat{}
	moved := map[string]int{}
	last := map[string]*oracleCount{}
	for _, p := range all {
		k := p.NDC + "/" + p.Unit
		if book[k] == nil {
			book[k], since[k] = new(big.Rat), map[string]*big.Rat{}
		}
		q, _ := new(big.Rat).SetString(p.Quantity)
		if p.Type != "count" {
			book[k].Add(book[k], new(big.Rat).Mul(q, big.NewRat(sign[p.Type], 1)))
			o.running[p.MovementID] = new(big.Rat).Set(book[k])
			bucket := p.Type
			if p.Reason == "count_correction" {
				bucket += "/correction"
				o.corrections[map[string]int{"adjust_in": 0, "adjust_out": 1}[p.Type]]++
			} else if p.Reason == "theft" || p.Reason == "loss" {
				bucket += "/theft_loss"
			}
			addTo(since[k], bucket, q)
			moved[k]++
			continue
		}
		c := &oracleCount{p: p, book: new(big.Rat).Set(book[k]), counted: q, since: since[k], movements: moved[k]}
		if prev := last[k]; prev != nil {
			c.prevAt, c.prev = prev.p.OccurredAt, prev.counted
		}
		c.finish()
		o.counts[p.MovementID], last[k] = c, c
		since[k], moved[k] = map[string]*big.Rat{}, 0
	}
	return o
}

func addTo(m map[string]*big.Rat, k string, q *big.Rat) {
	if m[k] == nil {
		m[k] = new(big.Rat)
	}
	m[k].Add(m[k], q)
}

func (c *oracleCount) sum(keys ...string) *big.Rat {
	s := new(big.Rat)
	for _, k := range keys {
		if v := c.since[k]; v != nil {
			s.Add(s, v)
		}
	}
	return s
}

// finish works out the expected quantity of 1715.65 (the previous count,
// or zero, plus what came in less what went out, corrections left out),
// both variances and their percentages rounded half away from zero.
func (c *oracleCount) finish() {
	c.expected = new(big.Rat)
	if c.prev != nil {
		c.expected.Set(c.prev)
	}
	c.expected.Add(c.expected, c.sum("receive", "transfer_in", "return", "adjust_in", "adjust"))
	c.expected.Sub(c.expected, c.sum("dispense", "transfer_out", "waste", "adjust_out", "adjust_out/theft_loss"))
	c.recVariance = new(big.Rat).Sub(c.counted, c.expected)
	c.bookVariance = new(big.Rat).Sub(c.counted, c.book)
	c.recPercent, c.bookPercent = percent(c.recVariance, c.expected), percent(c.bookVariance, c.book)
}

// percent is 100·v/of rounded to two decimals, half away from zero; ""
// when of is zero.
func percent(v, of *big.Rat) string {
	if of.Sign() == 0 {
		return ""
	}
	x := new(big.Rat).Mul(v, big.NewRat(10000, 1))
	x.Quo(x, of) // hundredths of a percent
	n, rem := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if new(big.Int).Mul(new(big.Int).Abs(rem), big.NewInt(2)).Cmp(x.Denom()) >= 0 {
		n.Add(n, big.NewInt(int64(x.Sign())))
	}
	return new(big.Rat).SetFrac(n, big.NewInt(100)).FloatString(2)
}

// rat reads a view's number; "" is nil.
func rat(t *testing.T, s string) *big.Rat {
	t.Helper()
	if s == "" {
		return nil
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		t.Fatalf("not a number: %q", s)
	}
	return r
}

func sameRat(t *testing.T, got string, want *big.Rat) bool {
	t.Helper()
	g := rat(t, got)
	return (g == nil) == (want == nil) && (g == nil || g.Cmp(want) == 0)
}

// row is a table row by column name.
func rowOf(tab *Table, i int) map[string]string {
	m := make(map[string]string, len(tab.Columns))
	for j, c := range tab.Columns {
		m[c] = tab.Rows[i][j]
	}
	return m
}

// movementIDs maps the keys of the year's movements to their ids.
func movementIDs(t *testing.T, ctx context.Context, conn *pgx.Conn) map[string]string {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT key, movement_id FROM movements`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var k, id string
		err := r.Scan(&k, &id)
		return [2]string{k, id}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range ids {
		out[kv[0]] = kv[1]
	}
	return out
}

// checkCounts compares every count of the counts report with the oracle.
func checkCounts(t *testing.T, ctx context.Context, conn *pgx.Conn, o *yearOracle) {
	tab, err := Report(ctx, conn, ReportQuery{Kind: ReportCounts, Store: "S0001"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Rows) != len(o.counts) {
		t.Fatalf("counts: %d rows, want %d", len(tab.Rows), len(o.counts))
	}
	ids := movementIDs(t, ctx, conn)
	for i := range tab.Rows {
		r := rowOf(tab, i)
		c := o.counts[ids[r["key"]]]
		if c == nil {
			t.Fatalf("count %s is not one the oracle knows", r["key"])
		}
		want := map[string]*big.Rat{"book_balance": c.book, "counted": c.counted, "variance": c.bookVariance,
			"previous_counted": c.prev, "received": c.sum("receive"), "dispensed": c.sum("dispense"),
			"returned": c.sum("return"), "wasted": c.sum("waste"), "transferred_in": c.sum("transfer_in"),
			"transferred_out": c.sum("transfer_out"), "adjusted_in": c.sum("adjust_in", "adjust_in/correction"),
			"adjusted_out":   c.sum("adjust_out", "adjust_out/correction", "adjust_out/theft_loss"),
			"corrections_in": c.sum("adjust_in/correction"), "corrections_out": c.sum("adjust_out/correction"),
			"thefts_losses": c.sum("adjust_out/theft_loss"), "movements_since": big.NewRat(int64(c.movements), 1)}
		for col, w := range want {
			if !sameRat(t, r[col], w) {
				t.Errorf("count %s (%s %s): %s = %s, want %v", c.p.MovementID, c.p.NDC, c.p.OccurredAt, col, r[col], w)
			}
		}
		if !samePct(t, r["variance_pct"], c.bookPercent) || !sameTime(r["previous_count_at"], c.prevAt) ||
			r["count_kind"] != c.p.CountKind || r["count_method"] != c.p.CountMethod || r["ndc"] != c.p.NDC {
			t.Errorf("count %s: %v; want pct %s, previous at %s, %s %s", c.p.MovementID, r, c.bookPercent, c.prevAt, c.p.CountKind, c.p.CountMethod)
		}
	}
}

// samePct compares a view's percentage with the oracle's, rounded to
// hundredths ("" for none): as numbers, since a numeric zero reads "0".
func samePct(t *testing.T, got, want string) bool {
	t.Helper()
	if got == "" || want == "" {
		return got == want
	}
	return sameRat(t, got, rat(t, want))
}

func sameTime(got, want string) bool {
	if got == "" || want == "" {
		return got == want
	}
	g, err1 := time.Parse(time.RFC3339Nano, got)
	w, err2 := time.Parse(time.RFC3339Nano, want)
	return err1 == nil && err2 == nil && g.Equal(w)
}

// checkReconciliation compares each quarter's 1715.65 report with the
// oracle: the Schedule II counts of the quarter, and nothing else.
func checkReconciliation(t *testing.T, ctx context.Context, conn *pgx.Conn, o *yearOracle) {
	ids := movementIDs(t, ctx, conn)
	total := 0
	for q := 1; q <= 4; q++ {
		from, to, _ := QuarterBounds(fmt.Sprintf("%dQ%d", theYear, q))
		tab, err := Report(ctx, conn, ReportQuery{Kind: ReportReconciliation, Store: "S0001", From: from, To: to})
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, c := range o.counts {
			at, _ := time.Parse(time.RFC3339, c.p.OccurredAt)
			if c.p.Schedule == "CII" && !at.Before(from) && at.Before(to) {
				want++
			}
		}
		if len(tab.Rows) != want || want < 2 {
			t.Fatalf("Q%d: %d rows, want %d (at least 2)", q, len(tab.Rows), want)
		}
		total += want
		for i := range tab.Rows {
			r := rowOf(tab, i)
			c := o.counts[ids[r["key"]]]
			opening := c.prev
			if opening == nil {
				opening = new(big.Rat)
			}
			checks := map[string]*big.Rat{"opening": opening, "expected": c.expected, "counted": c.counted,
				"variance": c.recVariance, "book_balance": c.book, "book_variance": c.bookVariance,
				"other_in": c.sum("adjust_in", "adjust"), "other_out": c.sum("adjust_out"),
				"thefts_losses": c.sum("adjust_out/theft_loss")}
			for col, w := range checks {
				if !sameRat(t, r[col], w) {
					t.Errorf("Q%d count %s: %s = %s, want %v", q, c.p.MovementID, col, r[col], w)
				}
			}
			due := ""
			if c.recVariance.Sign() < 0 {
				at, _ := time.Parse(time.RFC3339, c.p.OccurredAt)
				due = at.AddDate(0, 0, 30).Format(time.DateOnly)
			}
			if !samePct(t, r["variance_pct"], c.recPercent) || r["california_loss_report_due"] != due {
				t.Errorf("Q%d count %s: pct %s due %s, want %s and %s", q, c.p.MovementID, r["variance_pct"], r["california_loss_report_due"], c.recPercent, due)
			}
		}
	}
	if total < 10 {
		t.Errorf("the reconciliations hold %d counts", total)
	}
}

// checkForm106 compares the Form 106 drafts with the year's theft and
// loss, written out by hand.
func checkForm106(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	tab, err := Report(ctx, conn, ReportQuery{Kind: ReportForm106, Store: "S0001"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range tab.Rows {
		r := rowOf(tab, i)
		got = append(got, strings.Join([]string{r["store_id"], r["discovered_at"], r["reason"], r["ndc"], r["schedule"],
			r["quantity"], r["unit"], r["written_notice_due"], r["form_106_due"], r["california_report_due"]}, " "))
	}
	want := []string{
		"S0001 2025-07-03T20:00:00Z theft 00591-0540-01 CII 12.000000 EA 2025-07-07 2025-08-17 2025-07-17",
		"S0001 2025-11-26T20:00:00Z loss 00054-0237-25 CII 5.500000 ML 2025-11-28 2026-01-10 2025-12-26",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Form 106 drafts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// checkRunning compares every running balance of the perpetual inventory,
// and the balances now, with the oracle's book.
func checkRunning(t *testing.T, ctx context.Context, conn *pgx.Conn, o *yearOracle) {
	rows, err := conn.Query(ctx, `SELECT m.movement_id, p.balance::text FROM perpetual_inventory p JOIN movements m USING (store_id, key)`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var id, b string
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		n++
		if !sameRat(t, b, o.running[id]) {
			t.Errorf("balance after %s: %s, want %v", id, b, o.running[id])
		}
	}
	rows.Close()
	if n != len(o.running) {
		t.Errorf("perpetual_inventory: %d rows, want %d", n, len(o.running))
	}
	tab, err := Report(ctx, conn, ReportQuery{Kind: ReportBalances, Store: "S0001"})
	if err != nil || len(tab.Rows) != len(yearProducts) {
		t.Fatalf("balances: %v, %v", tab, err)
	}
}
