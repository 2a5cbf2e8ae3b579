package sink

import (
	"context"
	"database/sql/driver"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reports are the views hq report prints.
const (
	ReportBalances   = "balances"
	ReportInventory  = "inventory"
	ReportScheduleII = "schedule-ii"
	ReportRx         = "rx"
)

// ReportQuery selects what a report shows.
type ReportQuery struct {
	Kind  string
	Store string // "" every store (required for schedule-ii and inventory)
	NDC   string
	RxRef string // for rx
	// From and To bound occurred_at: From ≤ occurred_at < To; zero is open.
	From, To time.Time
	Limit    int
}

// Table is a report's result: column names and rows of text.
type Table struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Report runs q against the views.
func Report(ctx context.Context, conn *pgx.Conn, q ReportQuery) (*Table, error) {
	sql, args, err := reportSQL(q)
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("sink: report %s: %w", q.Kind, err)
	}
	defer rows.Close()
	t, err := readTable(rows)
	if err != nil {
		return nil, fmt.Errorf("sink: report %s: %w", q.Kind, err)
	}
	return t, nil
}

// conditions are a report's WHERE conditions and their arguments.
type conditions struct {
	where []string
	args  []any
}

// add adds the condition cond, whose %d is its placeholder's number, with
// its argument v.
func (c *conditions) add(cond string, v any) {
	c.args = append(c.args, v)
	c.where = append(c.where, fmt.Sprintf(cond, len(c.args)))
}

// reportSQL is the query of q and its arguments.
func reportSQL(q ReportQuery) (string, []any, error) {
	var c conditions
	sql, err := reportView(q, &c)
	if err != nil {
		return "", nil, err
	}
	if q.Kind != ReportBalances {
		if !q.From.IsZero() {
			c.add("occurred_at >= $%d", q.From)
		}
		if !q.To.IsZero() {
			c.add("occurred_at < $%d", q.To)
		}
	}
	if len(c.where) > 0 {
		sql = "SELECT * FROM (" + sql + ") v WHERE " + strings.Join(c.where, " AND ")
	}
	// The inventory's running balance is over the whole history: the
	// period filter applies after the window, outside the view.
	switch q.Kind {
	case ReportBalances:
		sql += " ORDER BY store_id, ndc, unit"
	case ReportRx:
		sql += " ORDER BY occurred_at, store_id, seq"
	default:
		sql += " ORDER BY store_id, occurred_at, seq"
	}
	if q.Limit > 0 {
		sql += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	return sql, c.args, nil
}

// reportView is the select of q's view, its conditions but the period's
// added to c; it refuses a query the report cannot answer.
func reportView(q ReportQuery, c *conditions) (string, error) {
	switch q.Kind {
	case ReportBalances:
		if q.Store != "" {
			c.add("store_id = $%d", q.Store)
		}
		if q.NDC != "" {
			c.add("ndc = $%d", q.NDC)
		}
		if !q.From.IsZero() || !q.To.IsZero() {
			return "", fmt.Errorf("sink: report balances: the balance is as of now; use the inventory report for a period")
		}
		return `SELECT store_id, ndc, unit, schedule, balance, received, dispensed, returned, wasted, adjusted,
			transferred_in, transferred_out, movements, last_movement_at FROM controlled_balances`, nil
	case ReportInventory:
		if q.Store == "" {
			return "", fmt.Errorf("sink: report inventory: a store is required")
		}
		c.add("store_id = $%d", q.Store)
		if q.NDC != "" {
			c.add("ndc = $%d", q.NDC)
		}
		return `SELECT store_id, ndc, unit, schedule, occurred_at, seq, key, type, quantity, change, balance, dea_form_222
			FROM perpetual_inventory`, nil
	case ReportScheduleII:
		if q.Store == "" {
			return "", fmt.Errorf("sink: report schedule-ii: a store is required")
		}
		c.add("store_id = $%d", q.Store)
		return `SELECT store_id, occurred_at, seq, key, type, ndc, quantity, unit, schedule, dea_form_222, lot
			FROM schedule_ii_movements`, nil
	case ReportRx:
		if q.RxRef == "" {
			return "", fmt.Errorf("sink: report rx: a prescription reference is required")
		}
		c.add("rx_ref = $%d", q.RxRef)
		if q.Store != "" {
			c.add("store_id = $%d", q.Store)
		}
		return `SELECT rx_ref, store_id, occurred_at, seq, key, type, ndc, quantity, unit, schedule, dea_form_222
			FROM prescription_movements`, nil
	default:
		return "", fmt.Errorf("sink: unknown report %q (balances, inventory, schedule-ii, rx)", q.Kind)
	}
}

// readTable reads rows into a table of text, its columns named after
// the rows' fields.
func readTable(rows pgx.Rows) (*Table, error) {
	t := &Table{}
	for _, f := range rows.FieldDescriptions() {
		t.Columns = append(t.Columns, f.Name)
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = cell(v)
		}
		t.Rows = append(t.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return t, nil
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case fmt.Stringer:
		return x.String()
	case driver.Valuer:
		d, err := x.Value()
		if err == nil {
			return fmt.Sprint(d)
		}
	}
	return fmt.Sprint(v)
}

// WriteTable prints t aligned for a terminal.
func (t *Table) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(t.Columns, "\t")))
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// WriteCSV prints t as CSV with a header line.
func (t *Table) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(t.Columns)
	for _, r := range t.Rows {
		cw.Write(r)
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON prints t as a JSON array of objects, one per row.
func (t *Table) WriteJSON(w io.Writer) error {
	out := make([]map[string]string, 0, len(t.Rows))
	for _, r := range t.Rows {
		o := make(map[string]string, len(r))
		for i, c := range t.Columns {
			o[c] = r[i]
		}
		out = append(out, o)
	}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(out)
}
