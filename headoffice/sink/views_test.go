package sink

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// milli is a quantity in thousandths, the oracle's exact arithmetic.
type milli int64

func (m milli) String() string {
	s := strconv.FormatInt(int64(m/1000), 10)
	if f := m % 1000; f != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%03d", f), "0")
	}
	return s
}

// parseMilli reads the view's numeric (6 decimals).
func parseMilli(t *testing.T, s string) milli {
	t.Helper()
	whole, frac, _ := strings.Cut(s, ".")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		t.Fatalf("balance %q: %v", s, err)
	}
	frac = (frac + "000000")[:6]
	f, _ := strconv.ParseInt(frac, 10, 64)
	if f%1000 != 0 {
		t.Fatalf("balance %q has more than 3 decimals", s)
	}
	if strings.HasPrefix(whole, "-") {
		return milli(w*1000 - f/1000)
	}
	return milli(w*1000 + f/1000)
}

type histKey struct{ store, ndc string }

// TestViews writes a generated history of three stores (receipts with DEA
// Form 222 numbers, dispenses, returns, waste, adjustments, and transfers
// between the stores, in several units and fractions) through the sink,
// and checks the views against balances computed here, movement by
// movement, and against a few computed by hand.
func TestViews(t *testing.T) {
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())

	// By hand: S0001 receives 100 of A, dispenses 30, takes 5 back, wastes
	// 2.5, sends 10 to S0002, finds 1 more on a count: 63.5. S0002: 10.
	stores := []string{"S0001", "S0002", "S0003"}
	ndcs := map[string]string{"00002-3227-30": "CII", "0409-1234-01": "CIIN", "55555-222-33": "CIV"}
	seq := map[string]uint64{}
	var all []payload
	at := time.Date(2026, 2, 1, 8, 0, 0, 0, time.UTC)
	add := func(store string, p payload) {
		seq[store]++
		at = at.Add(time.Minute)
		p.OccurredAt = at.Format(time.RFC3339)
		p.MovementID = fmt.Sprintf("%s-%d", store, seq[store])
		p.StoreID = store
		if p.Schedule == "" {
			p.Schedule = ndcs[p.NDC]
		}
		all = append(all, p)
		archive(t, js, mv(store, seq[store], p), 0)
	}
	a := "00002-3227-30"
	add("S0001", payload{Type: "receive", NDC: a, Quantity: "100", DEAForm222: "222000001"})
	add("S0001", payload{Type: "dispense", NDC: a, Quantity: "30", RxRef: "RX-A"})
	add("S0001", payload{Type: "return", NDC: a, Quantity: "5", RxRef: "RX-A"})
	add("S0001", payload{Type: "waste", NDC: a, Quantity: "2.5"})
	add("S0001", payload{Type: "transfer_out", NDC: a, Quantity: "10", DEAForm222: "222000002"})
	add("S0002", payload{Type: "transfer_in", NDC: a, Quantity: "10", DEAForm222: "222000002"})
	add("S0001", payload{Type: "adjust", NDC: a, Quantity: "1"})
	// Not controlled: in no controlled view.
	add("S0001", payload{Type: "receive", NDC: "11111-2222-33", Quantity: "7"})

	// Generated: 600 movements more, transfers between stores among them.
	r := rand.New(rand.NewPCG(1, 2))
	ndcList := []string{"00002-3227-30", "0409-1234-01", "55555-222-33"}
	units := map[string]string{"00002-3227-30": "EA", "0409-1234-01": "ML", "55555-222-33": "EA"}
	for range 600 {
		s := stores[r.IntN(len(stores))]
		ndc := ndcList[r.IntN(len(ndcList))]
		q := milli(r.IntN(20000) + 1)
		p := payload{NDC: ndc, Unit: units[ndc], Quantity: q.String()}
		switch k := r.IntN(10); {
		case k < 3:
			p.Type = "receive"
			if ndcs[ndc] != "CIV" {
				p.DEAForm222 = fmt.Sprintf("222%06d", r.IntN(1e6))
			}
		case k < 6:
			p.Type, p.RxRef = "dispense", fmt.Sprintf("RX-%d", r.IntN(50))
		case k < 7:
			p.Type, p.RxRef = "return", fmt.Sprintf("RX-%d", r.IntN(50))
		case k < 8:
			p.Type = "waste"
		case k < 9:
			p.Type = "adjust"
		default:
			to := stores[(slicesIndex(stores, s)+1+r.IntN(len(stores)-1))%len(stores)]
			p.Type = "transfer_out"
			add(s, p)
			p.Type = "transfer_in"
			add(to, p)
			continue
		}
		add(s, p)
	}
	runSink(t, db, Options{Conn: nc, Batch: 97})

	// The oracle: signs by type, the running balance per store and NDC.
	sign := map[string]milli{"receive": 1, "return": 1, "transfer_in": 1, "adjust": 1, "dispense": -1, "waste": -1, "transfer_out": -1}
	balance := map[histKey]milli{}
	running := map[string]milli{} // movement_id → balance after it
	for _, p := range all {
		if p.Schedule == "" {
			continue
		}
		c, _ := movement.CanonicalNDC(p.NDC)
		k := histKey{p.StoreID, c}
		balance[k] += sign[p.Type] * parseMilli(t, p.Quantity)
		running[p.MovementID] = balance[k]
	}
	conn := db.conn(t)
	ctx := testContext(t)
	// The hand-computed ones, before the generated history moved them on:
	// read from the inventory at the hand-made movements.
	for id, want := range map[string]milli{"S0001-6": 63500, "S0002-1": 10000, "S0001-2": 70000, "S0001-4": 72500} {
		var got string
		if err := conn.QueryRow(ctx, `SELECT balance::text FROM perpetual_inventory p JOIN movements m USING (store_id, key) WHERE m.movement_id = $1`, id).Scan(&got); err != nil {
			t.Fatalf("inventory at %s: %v", id, err)
		}
		if g := parseMilli(t, got); g != want {
			t.Errorf("balance after %s: got %s, want %s (by hand)", id, g, want)
		}
	}
	// Every controlled movement's running balance.
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
		if want, ok := running[id]; !ok || parseMilli(t, b) != want {
			t.Errorf("running balance after %s: got %s, want %s", id, b, want)
		}
	}
	rows.Close()
	if n != len(running) {
		t.Errorf("perpetual_inventory has %d movements, want %d controlled", n, len(running))
	}
	// The balance now, through the report.
	tab, err := Report(ctx, conn, ReportQuery{Kind: ReportBalances})
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Rows) != len(balance) {
		t.Errorf("balances: %d rows, want %d", len(tab.Rows), len(balance))
	}
	for _, row := range tab.Rows {
		k := histKey{row[0], row[1]}
		if got := parseMilli(t, row[4]); got != balance[k] {
			t.Errorf("balance of %v: got %s, want %s", k, got, balance[k])
		}
	}
	// Schedule II of S0001 in a period, with the 222 numbers.
	from, to := time.Date(2026, 2, 1, 8, 1, 0, 0, time.UTC), time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)
	var want2 []string
	for _, p := range all {
		occ, _ := time.Parse(time.RFC3339, p.OccurredAt)
		if p.StoreID == "S0001" && (p.Schedule == "CII" || p.Schedule == "CIIN") && !occ.Before(from) && occ.Before(to) {
			want2 = append(want2, p.MovementID+"/"+p.DEAForm222)
		}
	}
	tab, err = Report(ctx, conn, ReportQuery{Kind: ReportScheduleII, Store: "S0001", From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	var got2 []string
	idx := slicesIndex(tab.Columns, "dea_form_222")
	q, err := conn.Query(ctx, `SELECT movement_id || '/' || coalesce(dea_form_222, '') FROM schedule_ii_movements
		WHERE store_id = 'S0001' AND occurred_at >= $1 AND occurred_at < $2 ORDER BY occurred_at, seq`, from, to)
	if err != nil {
		t.Fatal(err)
	}
	for q.Next() {
		var s string
		q.Scan(&s)
		got2 = append(got2, s)
	}
	q.Close()
	if strings.Join(got2, ",") != strings.Join(want2, ",") || len(tab.Rows) != len(want2) || idx < 0 {
		t.Errorf("schedule II of S0001: got %v (report %d rows), want %v", got2, len(tab.Rows), want2)
	}
	if len(want2) < 10 || !strings.Contains(strings.Join(want2, ","), "S0001-1/222000001") {
		t.Errorf("schedule II: the generated period holds too little to check (%d)", len(want2))
	}
	// One prescription's movements.
	var wantRx int
	for _, p := range all {
		if p.RxRef == "RX-A" {
			wantRx++
		}
	}
	tab, err = Report(ctx, conn, ReportQuery{Kind: ReportRx, RxRef: "RX-A"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Rows) != wantRx || wantRx != 2 {
		t.Errorf("rx RX-A: %d rows, want %d (2 by hand)", len(tab.Rows), wantRx)
	}
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
