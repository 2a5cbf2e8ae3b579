package sink

import (
	"context"
	"database/sql/driver"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rxedge/agent/movement"
)

// Reports are the views hq report prints.
const (
	ReportBalances   = "balances"
	ReportInventory  = "inventory"
	ReportScheduleII = "schedule-ii"
	ReportRx         = "rx"
	// ReportCounts is every physical count with the book at its time, the
	// variance and what moved since the previous count (count_variances).
	ReportCounts = "counts"
	// ReportReconciliation is the quarterly Schedule II reconciliation
	// of 16 CCR 1715.65 (schedule_ii_reconciliation), for --store and the
	// counts in [--from, --to) (QuarterBounds).
	ReportReconciliation = "reconciliation"
	// ReportForm106 drafts DEA Form 106 for each theft or loss of a
	// controlled substance, with the notices' due dates (Form106Dues).
	ReportForm106 = "form-106"
	// ReportUnits lists each store's NDCs seen in more than one unit.
	ReportUnits = "units"
)

// Reports lists every report, in the order a usage text names them.
var Reports = []string{ReportBalances, ReportInventory, ReportScheduleII, ReportRx,
	ReportCounts, ReportReconciliation, ReportForm106, ReportUnits}

// ReportQuery selects what a report shows.
type ReportQuery struct {
	Kind  string
	Store string // "" every store (required for schedule-ii, inventory and reconciliation)
	// NDC is one product, in any spelling: its canonical form is looked
	// for, and a bare 10-digit NDC finds each product it may stand for.
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
	switch q.Kind {
	case ReportForm106:
		err = addForm106Dues(t)
	case ReportReconciliation:
		err = addReconciliationDues(t)
	}
	if err != nil {
		return nil, fmt.Errorf("sink: report %s: %w", q.Kind, err)
	}
	return t, nil
}

// ndcs is what a report's --ndc looks for: the canonical form of an NDC
// in any spelling, or each product a bare 10-digit NDC may stand for.
func ndcs(s string) ([]string, error) {
	c, err := movement.CanonicalNDC(s)
	if err == nil {
		return []string{c}, nil
	}
	if cs, ok := movement.NDCCandidates(s); ok {
		list := cs[:]
		slices.Sort(list)
		return slices.Compact(list), nil
	}
	return nil, fmt.Errorf("sink: report: %w", ErrNotAnNDC)
}

// ErrNotAnNDC is a report's refusal of an NDC it cannot read, with the
// rule of what it can.
var ErrNotAnNDC = errors.New("--ndc is not an NDC: give 4-4-2, 5-3-2 or 5-4-1 digits with hyphens, " +
	"11 digits as 5-4-2 with or without hyphens, or 10 bare digits (each product they may stand for)")

// CheckNDC tells whether a report can look for the NDC s: nil, or an
// error wrapping ErrNotAnNDC.
func CheckNDC(s string) error {
	_, err := ndcs(s)
	return err
}

// addNDC adds q's NDC, when it has one, to c.
func addNDC(q ReportQuery, c *conditions) error {
	if q.NDC == "" {
		return nil
	}
	list, err := ndcs(q.NDC)
	if err != nil {
		return err
	}
	c.add("ndc = ANY($%d)", list)
	return nil
}

// timeColumn is the column a report's period bounds.
func timeColumn(kind string) string {
	switch kind {
	case ReportCounts, ReportReconciliation:
		return "counted_at"
	case ReportForm106:
		return "discovered_at"
	case ReportUnits:
		return "last_at"
	}
	return "occurred_at"
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
			c.add(timeColumn(q.Kind)+" >= $%d", q.From)
		}
		if !q.To.IsZero() {
			c.add(timeColumn(q.Kind)+" < $%d", q.To)
		}
	}
	if len(c.where) > 0 {
		sql = "SELECT * FROM (" + sql + ") v WHERE " + strings.Join(c.where, " AND ")
	}
	// The inventory's running balance is over the whole history: the
	// period filter applies after the window, outside the view.
	switch q.Kind {
	case ReportBalances, ReportUnits:
		sql += " ORDER BY store_id, ndc, unit"
	case ReportRx:
		sql += " ORDER BY occurred_at, store_id, seq"
	case ReportCounts, ReportReconciliation:
		sql += " ORDER BY store_id, ndc, unit, counted_at, seq"
	case ReportForm106:
		sql += " ORDER BY store_id, discovered_at, seq"
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
		if err := addNDC(q, c); err != nil {
			return "", err
		}
		if !q.From.IsZero() || !q.To.IsZero() {
			return "", fmt.Errorf("sink: report balances: the balance is as of now; use the inventory report for a period")
		}
		// New columns go last, so that a consumer of the CSV finds the
		// earlier ones where they were.
		return `SELECT store_id, ndc, unit, schedule, balance, received, dispensed, returned, wasted, adjusted_in,
			transferred_in, transferred_out, movements, last_movement_at, adjusted_out, mixed_units FROM controlled_balances`, nil
	case ReportInventory:
		if q.Store == "" {
			return "", fmt.Errorf("sink: report inventory: a store is required")
		}
		c.add("store_id = $%d", q.Store)
		if err := addNDC(q, c); err != nil {
			return "", err
		}
		return `SELECT store_id, ndc, unit, schedule, occurred_at, seq, key, type, quantity, change, balance, dea_form_222,
			reason, mixed_units, ndc_as_sent FROM perpetual_inventory`, nil
	case ReportScheduleII:
		if q.Store == "" {
			return "", fmt.Errorf("sink: report schedule-ii: a store is required")
		}
		c.add("store_id = $%d", q.Store)
		if err := addNDC(q, c); err != nil {
			return "", err
		}
		return `SELECT store_id, occurred_at, seq, key, type, ndc, quantity, unit, schedule, dea_form_222, lot, reason
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
	}
	return inventoryView(q, c)
}

// inventoryView is reportView for the reports of counts, thefts and
// losses, and units.
func inventoryView(q ReportQuery, c *conditions) (string, error) {
	if q.Kind == ReportReconciliation && q.Store == "" {
		return "", fmt.Errorf("sink: report reconciliation: a store is required")
	}
	if q.Store != "" {
		c.add("store_id = $%d", q.Store)
	}
	if err := addNDC(q, c); err != nil {
		return "", err
	}
	switch q.Kind {
	case ReportCounts:
		return `SELECT store_id, ndc, unit, schedule, counted_at, seq, key, count_kind, count_method, book_balance, counted,
			variance, variance_pct, previous_count_at, previous_counted, received, transferred_in, returned, adjusted_in,
			dispensed, transferred_out, wasted, adjusted_out, corrections_in, corrections_out, thefts_losses, movements_since
			FROM count_variances`, nil
	case ReportReconciliation:
		return `SELECT store_id, ndc, unit, schedule, count_kind, count_method, counted_at, seq, key, previous_count_at, opening,
			received, transferred_in, returned, other_in, dispensed, transferred_out, wasted, thefts_losses, other_out,
			expected, counted, variance, variance_pct, book_balance, book_variance FROM schedule_ii_reconciliation`, nil
	case ReportForm106:
		return `SELECT store_id, discovered_at, seq, key, reason, ndc, ndc_as_sent, schedule, quantity, unit, lot, movement_id
			FROM theft_loss_movements`, nil
	case ReportUnits:
		return `SELECT store_id, ndc, unit, movements, first_at, last_at FROM ndc_unit_conflicts`, nil
	}
	return "", fmt.Errorf("sink: unknown report %q (%s)", q.Kind, strings.Join(Reports, ", "))
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
