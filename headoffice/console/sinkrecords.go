package console

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SinkRecords are Records over the sink's PostgreSQL tables
// (headoffice/sink), each lookup served by one of its indexes: the
// movements' primary key (store_id, key), movements_rx_ref (rx_ref) and
// movements_store_ndc (store_id, ndc, occurred_at, seq). A lookup by key
// or NDC alone, without the store, has no index, and is not offered. An
// NDC is matched as the store sent it (4-4-2, 5-3-2, 5-4-1 or 11 digits).
// It reads neither the payload, the note nor the prescription reference.
type SinkRecords struct {
	Pool *pgxpool.Pool
}

// movementColumns are what a lookup reads, in scanMovement's order.
const movementColumns = `store_id, key, seq, movement_id, type, ndc, quantity::text, unit, occurred_at,
	coalesce(schedule, ''), coalesce(lot, ''), digest, archive_stream, archive_seq, archived_at`

// SinkQueries are the lookups' statements, for the test that checks each
// is served by an index.
var SinkQueries = map[string]string{
	"key":    `SELECT ` + movementColumns + ` FROM movements WHERE store_id = $1 AND key = $2`,
	"rx_ref": `SELECT ` + movementColumns + ` FROM movements WHERE rx_ref = $1 ORDER BY occurred_at DESC LIMIT $2`,
	"ndc":    `SELECT ` + movementColumns + ` FROM movements WHERE store_id = $1 AND ndc = $2 ORDER BY occurred_at DESC, seq DESC LIMIT $3`,
}

func scanMovement(row pgx.Row) (Movement, error) {
	var m Movement
	var seq, archiveSeq int64
	err := row.Scan(&m.Store, &m.Key, &seq, &m.MovementID, &m.Type, &m.NDC, &m.Quantity, &m.Unit, &m.OccurredAt,
		&m.Schedule, &m.Lot, &m.Digest, &m.ArchiveStream, &archiveSeq, &m.ArchivedAt)
	m.Seq, m.ArchiveSeq = uint64(seq), uint64(archiveSeq)
	return m, err
}

// ByKey is one store's movement of a key.
func (r SinkRecords) ByKey(ctx context.Context, store, key string) (Movement, error) {
	m, err := scanMovement(r.Pool.QueryRow(ctx, SinkQueries["key"], store, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return m, ErrNoMovement
	}
	if err != nil {
		return m, fmt.Errorf("console: look up a movement by key: %w", err)
	}
	return m, nil
}

// ByRxRef are the movements of a prescription reference, newest first.
func (r SinkRecords) ByRxRef(ctx context.Context, rxRef string, limit int) ([]Movement, error) {
	return r.list(ctx, "rx_ref", rxRef, limit)
}

// ByNDC are one store's movements of an NDC, newest first.
func (r SinkRecords) ByNDC(ctx context.Context, store, ndc string, limit int) ([]Movement, error) {
	return r.list(ctx, "ndc", store, ndc, limit)
}

func (r SinkRecords) list(ctx context.Context, by string, args ...any) ([]Movement, error) {
	rows, err := r.Pool.Query(ctx, SinkQueries[by], args...)
	if err != nil {
		return nil, fmt.Errorf("console: look up movements by %s: %w", by, err)
	}
	defer rows.Close()
	var out []Movement
	for rows.Next() {
		m, err := scanMovement(rows)
		if err != nil {
			return nil, fmt.Errorf("console: look up movements by %s: %w", by, err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("console: look up movements by %s: %w", by, err)
	}
	return out, nil
}
