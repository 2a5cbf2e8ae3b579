package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/internal/holdpoint"
)

// PGState keeps a verification's state in PostgreSQL: the row Name of
// verify_state (migration 0005 of the sink's schema), replaced whole in
// one statement, so a Load after a crash returns the old state or the
// new one. It is an audit.StateStore.
type PGState struct {
	Pool *pgxpool.Pool
	Name string
}

// Load returns the row's state, or audit.ErrNoState when there is none.
// A state over audit.MaxStateBytes is refused before it is read.
func (s PGState) Load(ctx context.Context) ([]byte, error) {
	var b []byte
	var n int64
	err := s.Pool.QueryRow(ctx, `SELECT CASE WHEN octet_length(state) <= $2 THEN state END, octet_length(state)
		FROM verify_state WHERE name = $1`, s.Name, int64(audit.MaxStateBytes)).Scan(&b, &n)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, audit.ErrNoState
	case err != nil:
		return nil, fmt.Errorf("service: read the verification state %q: %w", s.Name, err)
	case n > audit.MaxStateBytes:
		return nil, fmt.Errorf("service: the verification state %q is %d bytes, over %d: delete its row of verify_state and the next pass verifies the archives from the start", s.Name, n, audit.MaxStateBytes)
	}
	return b, nil
}

// Save replaces the row's state.
func (s PGState) Save(ctx context.Context, b []byte) error {
	if _, err := s.Pool.Exec(ctx, saveStateSQL, s.Name, b); err != nil {
		return fmt.Errorf("service: save the verification state %q: %w", s.Name, err)
	}
	return nil
}

const saveStateSQL = `INSERT INTO verify_state (name, state, passes, saved_at) VALUES ($1, $2, 1, now())
	ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state, passes = verify_state.passes + 1, saved_at = now()`

func (s PGState) String() string { return "PostgreSQL table verify_state, row " + s.Name }

// heldState is the StateStore a verification pass of the service runs
// with: it loads from PGState and holds what the pass saves, which the
// job then writes with the pass's findings in one transaction.
type heldState struct {
	PGState
	saved []byte
}

func (h *heldState) Save(_ context.Context, b []byte) error {
	h.saved = b
	return nil
}

// standingKinds are the findings of a condition that holds while it is
// seen (the store's newest checkpoint not archived yet): any pass that
// does not find one again closes it. Every other finding is of something
// done to the archive, and only a pass that verified every log again
// from its anchor, and did not find it, closes it.
var standingKinds = []string{audit.KindCheckpointMissing}

// fence checks inside a transaction that its writer still holds its
// lease (Pass.Fence); nil checks nothing.
type fence func(ctx context.Context, tx pgx.Tx) error

// recordPass writes a pass's findings and its state in one transaction:
// each finding opened or found again (last_seen), the open ones no
// longer found closed (by the rule of standingKinds), and the state.
// KindUncovered is not a finding of the table: movements not signed yet
// are the normal tail of every log. The transaction locks the state's
// row and then checks the lease (fenced): a service that lost its lease
// writes nothing, and its error matches ErrLeaseLost.
func recordPass(ctx context.Context, pool *pgxpool.Pool, fenced fence, name string, state []byte, rep *audit.Report, now time.Time) (opened, closed int64, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO verify_state (name, state, passes, saved_at) VALUES ($1, ''::bytea, 0, now())
			ON CONFLICT (name) DO NOTHING`, name); err != nil {
			return fmt.Errorf("lock the verification state %q: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM verify_state WHERE name = $1 FOR UPDATE`, name); err != nil {
			return fmt.Errorf("lock the verification state %q: %w", name, err)
		}
		if fenced != nil {
			if err := fenced(ctx, tx); err != nil {
				return err
			}
		}
		for _, f := range rep.Findings {
			if f.Kind == audit.KindUncovered {
				continue
			}
			sizes := f.Sizes
			if sizes == nil {
				sizes = []int64{}
			}
			var inserted bool
			if err := tx.QueryRow(ctx, `INSERT INTO verify_findings
				(store_id, log, stream, kind, seq_from, seq_to, sizes, records, detail, first_seen, last_seen)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)
				ON CONFLICT (store_id, log, stream, kind, seq_from, seq_to, sizes) WHERE closed_at IS NULL
				DO UPDATE SET last_seen = EXCLUDED.last_seen, records = EXCLUDED.records, detail = EXCLUDED.detail
				RETURNING xmax = 0`,
				f.Store, f.Log, f.Stream, f.Kind, int64(f.From), int64(f.To), sizes, int64(f.Count), f.Detail, now).Scan(&inserted); err != nil {
				return fmt.Errorf("record a finding: %w", err)
			}
			if inserted {
				opened++
			}
		}
		full := (!rep.Incremental || rep.Counts[audit.KindArchiveRewritten] > 0) && rep.MoreFindings == 0
		tag, err := tx.Exec(ctx, `UPDATE verify_findings SET closed_at = $1
			WHERE closed_at IS NULL AND last_seen < $1 AND ($2 OR kind = ANY($3))`, now, full, standingKinds)
		if err != nil {
			return fmt.Errorf("close the findings no longer found: %w", err)
		}
		closed = tag.RowsAffected()
		holdpoint.Reach(holdpoint.VerifyRecord)
		if _, err := tx.Exec(ctx, saveStateSQL, name, state); err != nil {
			return fmt.Errorf("save the verification state %q: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("service: verification: %w", err)
	}
	return opened, closed, nil
}

// openFindings sets g to the open findings, one series per store and
// kind.
func openFindings(ctx context.Context, pool *pgxpool.Pool, g *prometheus.GaugeVec) error {
	rows, err := pool.Query(ctx, `SELECT store_id, kind, count(*) FROM verify_findings WHERE closed_at IS NULL GROUP BY 1, 2`)
	if err != nil {
		return err
	}
	type row struct {
		store, kind string
		n           int64
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.store, &x.kind, &x.n)
	})
	if err != nil {
		return err
	}
	g.Reset()
	for _, x := range got {
		g.WithLabelValues(x.store, x.kind).Set(float64(x.n))
	}
	return nil
}

// FindingsTable reads verify_findings for the console
// (console.Findings): its findings are the verification's.
type FindingsTable struct{ Pool *pgxpool.Pool }

var _ console.Findings = FindingsTable{}

// Findings are the newest findings of q.Store ("" for all), open or
// closed, newest seen first.
func (t FindingsTable) Findings(ctx context.Context, q console.FindingQuery) ([]console.Finding, error) {
	limit := q.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	rows, err := t.Pool.Query(ctx, `SELECT kind, store_id, log, seq_from, seq_to, last_seen, detail, closed_at IS NOT NULL
		FROM verify_findings WHERE $1 = '' OR store_id = $1 ORDER BY last_seen DESC, id DESC LIMIT $2`, q.Store, limit)
	if err != nil {
		return nil, fmt.Errorf("service: read the findings: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (console.Finding, error) {
		f := console.Finding{Source: "verification"}
		var from, to int64
		var closed bool
		err := r.Scan(&f.Kind, &f.Store, &f.Log, &from, &to, &f.At, &f.Detail, &closed)
		f.From, f.To = uint64(from), uint64(to)
		if closed {
			f.Detail += " (no longer found)"
		}
		return f, err
	})
}

// CountByStore counts the open findings of each of stores.
func (t FindingsTable) CountByStore(ctx context.Context, stores []string) (map[string]int, error) {
	rows, err := t.Pool.Query(ctx, `SELECT store_id, count(*) FROM verify_findings
		WHERE closed_at IS NULL AND store_id = ANY($1) GROUP BY 1`, stores)
	if err != nil {
		return nil, fmt.Errorf("service: count the findings: %w", err)
	}
	out := map[string]int{}
	_, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct{}, error) {
		var s string
		var n int
		err := r.Scan(&s, &n)
		out[s] = n
		return struct{}{}, err
	})
	return out, err
}
