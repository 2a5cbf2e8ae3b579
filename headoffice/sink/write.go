package sink

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/rxedge/agent/internal/holdpoint"
	"github.com/rxedge/agent/movement"
)

// ErrPositionMoved says the stored position of a stream is not the one a
// batch was read after: another sink wrote it, or a commit whose outcome
// was lost did. The batch is rolled back; the caller reads the position
// again and drops what it already holds.
var ErrPositionMoved = errors.New("sink: the stored position moved")

// stageDDL creates, on each new connection, the staging table COPY fills;
// its rows go at commit.
const stageDDL = `CREATE TEMP TABLE IF NOT EXISTS sink_stage (
	store_id text, key text, seq bigint, digest text, movement_id text, type text,
	ndc text, quantity text, unit text, occurred_at timestamptz, schedule text, lot text,
	expires text, rx_ref text, dea_form_222 text, note text, payload text,
	archive_stream text, archive_seq bigint, enqueued_at timestamptz, archived_at timestamptz,
	ndc_as_sent text, reason text, count_kind text, count_method text
) ON COMMIT DELETE ROWS`

var stageColumns = []string{"store_id", "key", "seq", "digest", "movement_id", "type",
	"ndc", "quantity", "unit", "occurred_at", "schedule", "lot",
	"expires", "rx_ref", "dea_form_222", "note", "payload",
	"archive_stream", "archive_seq", "enqueued_at", "archived_at",
	"ndc_as_sent", "reason", "count_kind", "count_method"}

const insertMovements = `INSERT INTO movements (store_id, key, seq, digest, movement_id, type,
	ndc, quantity, unit, occurred_at, schedule, lot, expires, rx_ref, dea_form_222, note, payload,
	archive_stream, archive_seq, enqueued_at, archived_at, ndc_as_sent, reason, count_kind, count_method)
SELECT store_id, key, seq, digest, movement_id, type,
	ndc, quantity::numeric, unit, occurred_at, schedule, lot, expires, rx_ref, dea_form_222, note, payload,
	archive_stream, archive_seq, enqueued_at, archived_at, ndc_as_sent, reason, count_kind, count_method
FROM sink_stage ORDER BY archive_seq
ON CONFLICT (store_id, key) DO NOTHING`

// notInserted finds the staged rows whose key movements holds from
// another archive message: a repeat or a conflict. A new statement, so it
// sees a row another transaction committed while the insert waited on it.
const notInserted = `SELECT s.archive_seq, m.digest
FROM sink_stage s JOIN movements m ON m.store_id = s.store_id AND m.key = s.key
WHERE NOT (m.archive_stream = s.archive_stream AND m.archive_seq = s.archive_seq)`

// Counts are what a batch wrote.
type Counts struct {
	Rows      uint64 `json:"rows"`
	Repeats   uint64 `json:"repeats"`
	Conflicts uint64 `json:"conflicts"`
	Rejects   uint64 `json:"rejects"`
	// Checkpoints are the stores' checkpoints passed over (not movements).
	Checkpoints uint64 `json:"checkpoints,omitempty"`
}

func (c *Counts) add(o Counts) {
	c.Rows += o.Rows
	c.Repeats += o.Repeats
	c.Conflicts += o.Conflicts
	c.Rejects += o.Rejects
	c.Checkpoints += o.Checkpoints
}

// Total is every message counted.
func (c Counts) Total() uint64 { return c.Rows + c.Repeats + c.Conflicts + c.Rejects + c.Checkpoints }

// text is s, or NULL when empty.
func text(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// writeBatch writes rows, the messages of stream after position from up to
// the last of rows, and moves the stream's position from from to it, in one
// transaction. rows are in stream order, all after from. With direct, the
// movements are first copied straight into movements (copyDirect); staged
// says they went through the staging table instead.
func writeBatch(ctx context.Context, conn *pgx.Conn, stream string, from uint64, rows []Row, direct bool) (c Counts, staged bool, err error) {
	if len(rows) == 0 {
		return c, false, nil
	}
	to := rows[len(rows)-1].StreamSeq
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		c, staged = Counts{}, false
		good, bad, cps := splitRejects(rows)
		c.Checkpoints = cps
		if len(good) > 0 {
			done := false
			if direct {
				var err error
				if done, err = copyDirect(ctx, tx, good); err != nil {
					return err
				}
				if done {
					c.Rows = uint64(len(good))
				}
			}
			if !done {
				staged = true
				if err := writeMovements(ctx, tx, good, &c); err != nil {
					return err
				}
			}
		}
		if len(bad) > 0 {
			if err := writeRejects(ctx, tx, bad, &c); err != nil {
				return err
			}
		}
		holdpoint.Reach(holdpoint.SinkBatch)
		if err := movePosition(ctx, tx, stream, from, to, c); err != nil {
			return err
		}
		if c.Total() != uint64(len(rows)) {
			return fmt.Errorf("sink: batch of %d messages counted %d", len(rows), c.Total())
		}
		return nil
	})
	if err != nil {
		return Counts{}, false, err
	}
	return c, staged, nil
}

// copyDirect copies good straight into movements, as a loader without
// the exactly-once promise would, under a savepoint: nearly every batch
// holds only new keys, and COPY into the table is the fastest way in.
// When a key is there already (a repeat, a conflict, the same key twice
// in good, or another writer's row) the unique index refuses the COPY;
// the savepoint is rolled back, nothing of good is written, and false
// says so: the caller stages the batch instead.
func copyDirect(ctx context.Context, tx pgx.Tx, good []Row) (bool, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("savepoint: %w", err)
	}
	n, err := sp.CopyFrom(ctx, pgx.Identifier{"movements"}, stageColumns, copyRows(good))
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == uniqueViolation {
			if rerr := sp.Rollback(ctx); rerr != nil {
				return false, fmt.Errorf("rollback to savepoint: %w", rerr)
			}
			return false, nil
		}
		return false, fmt.Errorf("copy: %w", err)
	}
	if n != int64(len(good)) {
		return false, fmt.Errorf("copy: copied %d rows of %d", n, len(good))
	}
	if err := sp.Commit(ctx); err != nil {
		return false, fmt.Errorf("release savepoint: %w", err)
	}
	return true, nil
}

// uniqueViolation is PostgreSQL's SQLSTATE unique_violation.
const uniqueViolation = "23505"

// copyRows is good as COPY rows in stageColumns' order, the quantity as
// a numeric (the table's type; the staging table's is text).
func copyRows(good []Row) pgx.CopyFromSource {
	return pgx.CopyFromSlice(len(good), func(i int) ([]any, error) {
		r := &good[i]
		var q pgtype.Numeric
		if err := q.Scan(r.M.Quantity); err != nil {
			return nil, fmt.Errorf("quantity of archive sequence %d: not a number", r.StreamSeq)
		}
		v := rowValues(r)
		v[7] = q
		return v, nil
	})
}

// rowValues is r in stageColumns' order.
func rowValues(r *Row) []any {
	var enq any
	if !r.EnqueuedAt.IsZero() {
		enq = r.EnqueuedAt
	}
	return []any{r.Store, r.Key, int64(r.Seq), r.Digest, r.M.MovementID, r.M.Type,
		r.M.NDC, r.M.Quantity, r.M.Unit, r.OccurredAt, text(r.M.Schedule), text(r.M.Lot),
		text(r.M.Expires), text(r.M.RxRef), text(r.M.DEAForm222), text(r.M.Note), string(r.Payload),
		r.Stream, int64(r.StreamSeq), enq, r.ArchivedAt,
		text(r.M.NDCAsSent), text(r.M.Reason), text(r.M.CountKind), text(r.M.CountMethod)}
}

// splitRejects splits rows into the movements and the rejects, in order,
// and counts the checkpoints, which are neither.
func splitRejects(rows []Row) (good, bad []Row, checkpoints uint64) {
	for _, r := range rows {
		if r.Checkpoint {
			checkpoints++
			continue
		}
		if r.Reject != "" {
			bad = append(bad, r)
		} else {
			good = append(good, r)
		}
	}
	return good, bad, checkpoints
}

// writeMovements stages good and inserts it into movements, then records
// the rows movements did not take as repeats or conflicts.
func writeMovements(ctx context.Context, tx pgx.Tx, good []Row, c *Counts) error {
	if err := stage(ctx, tx, good); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, insertMovements)
	if err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	c.Rows = uint64(tag.RowsAffected())
	if c.Rows >= uint64(len(good)) {
		return nil
	}
	kept, err := findKept(ctx, tx, len(good)-int(c.Rows))
	if err != nil {
		return err
	}
	return writeOthers(ctx, tx, good, kept, c)
}

// stage copies good into the staging table.
func stage(ctx context.Context, tx pgx.Tx, good []Row) error {
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"sink_stage"}, stageColumns, pgx.CopyFromSlice(len(good), func(i int) ([]any, error) {
		return rowValues(&good[i]), nil
	}))
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if n != int64(len(good)) {
		return fmt.Errorf("stage: copied %d rows of %d", n, len(good))
	}
	return nil
}

// findKept returns, by archive sequence, the digest movements kept for
// each staged row it did not take; n is how many there are.
func findKept(ctx context.Context, tx pgx.Tx, n int) (map[int64]string, error) {
	kept := make(map[int64]string, n)
	q, err := tx.Query(ctx, notInserted)
	if err != nil {
		return nil, fmt.Errorf("find repeats: %w", err)
	}
	for q.Next() {
		var seq int64
		var d string
		if err := q.Scan(&seq, &d); err != nil {
			q.Close()
			return nil, fmt.Errorf("find repeats: %w", err)
		}
		kept[seq] = d
	}
	q.Close()
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("find repeats: %w", err)
	}
	return kept, nil
}

// writeRejects copies bad into sink_rejects.
func writeRejects(ctx context.Context, tx pgx.Tx, bad []Row, c *Counts) error {
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"sink_rejects"},
		[]string{"archive_stream", "archive_seq", "store_id", "reason", "archived_at"},
		pgx.CopyFromSlice(len(bad), func(i int) ([]any, error) {
			r := &bad[i]
			return []any{r.Stream, int64(r.StreamSeq), r.Store, r.Reject, r.ArchivedAt}, nil
		}))
	if err != nil {
		return fmt.Errorf("rejects: %w", err)
	}
	c.Rejects = uint64(len(bad))
	return nil
}

// movePosition moves the stream's position from from to to and adds c to
// its counts; ErrPositionMoved when the position is no longer from.
func movePosition(ctx context.Context, tx pgx.Tx, stream string, from, to uint64, c Counts) error {
	tag, err := tx.Exec(ctx, `UPDATE sink_positions
			SET last_seq = $3, rows = rows + $4, repeats = repeats + $5, conflicts = conflicts + $6, rejects = rejects + $7,
				checkpoints = checkpoints + $8, updated_at = now()
			WHERE archive_stream = $1 AND last_seq = $2`,
		stream, int64(from), int64(to), int64(c.Rows), int64(c.Repeats), int64(c.Conflicts), int64(c.Rejects), int64(c.Checkpoints))
	if err != nil {
		return fmt.Errorf("position: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return ErrPositionMoved
	}
	return nil
}

// writeOthers records the staged rows movements did not take: a repeat
// when the kept row has the same digest, or its movement in another
// spelling of the NDC (movement.Prepared.Equivalent: a store that forgot
// the key resent it as its client spelled it then); else a conflict.
func writeOthers(ctx context.Context, tx pgx.Tx, good []Row, kept map[int64]string, c *Counts) error {
	var reps, confs [][]any
	for i := range good {
		r := &good[i]
		d, ok := kept[int64(r.StreamSeq)]
		if !ok {
			continue
		}
		if d == r.Digest || sameMovement(r, d) {
			reps = append(reps, []any{r.Stream, int64(r.StreamSeq), r.Store, r.Key, int64(r.Seq), r.Digest, r.ArchivedAt})
			continue
		}
		var enq any
		if !r.EnqueuedAt.IsZero() {
			enq = r.EnqueuedAt
		}
		confs = append(confs, []any{r.Stream, int64(r.StreamSeq), r.Store, r.Key, int64(r.Seq), r.Digest, d, string(r.Payload), enq, r.ArchivedAt})
	}
	if len(reps) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"movement_repeats"},
			[]string{"archive_stream", "archive_seq", "store_id", "key", "seq", "digest", "archived_at"}, pgx.CopyFromRows(reps)); err != nil {
			return fmt.Errorf("repeats: %w", err)
		}
	}
	if len(confs) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"movement_conflicts"},
			[]string{"archive_stream", "archive_seq", "store_id", "key", "seq", "digest", "kept_digest", "payload", "enqueued_at", "archived_at"}, pgx.CopyFromRows(confs)); err != nil {
			return fmt.Errorf("conflicts: %w", err)
		}
	}
	c.Repeats, c.Conflicts = uint64(len(reps)), uint64(len(confs))
	return nil
}

// sameMovement reports whether the kept digest d is r's movement with its
// NDC spelled otherwise.
func sameMovement(r *Row, d string) bool {
	var kept [32]byte
	if _, err := hex.Decode(kept[:], []byte(d)); err != nil {
		return false
	}
	p := movement.Prepared{Payload: r.Payload}
	if _, err := hex.Decode(p.Digest[:], []byte(r.Digest)); err != nil {
		return false
	}
	return p.Equivalent(kept)
}

// startAgain records the rows of stream, found created again at
// created, under the position row rec, and makes it the stream's current
// one: in one transaction, so that a crash leaves the one or the other.
// The rows of the earlier stream stay as they are (the sink only ever
// inserts them).
func startAgain(ctx context.Context, conn *pgx.Conn, stream, rec string, created time.Time) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO sink_positions (archive_stream, archive_created) VALUES ($1, $2)
			ON CONFLICT DO NOTHING`, rec, created); err != nil {
			return fmt.Errorf("sink: start the position of the recreated %s: %w", stream, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE sink_positions SET current_as = $2, recreated = recreated + 1, updated_at = now()
			WHERE archive_stream = $1`, stream, rec); err != nil {
			return fmt.Errorf("sink: start the position of the recreated %s: %w", stream, err)
		}
		return nil
	})
}

// ensurePosition makes the stream's position row and returns the
// position of the row its rows are recorded under (rec: the stream's own,
// or the one of the stream created again, startAgain).
func ensurePosition(ctx context.Context, conn *pgx.Conn, stream string) (pos uint64, rec string, err error) {
	if _, err := conn.Exec(ctx, `INSERT INTO sink_positions (archive_stream) VALUES ($1) ON CONFLICT DO NOTHING`, stream); err != nil {
		return 0, "", fmt.Errorf("sink: position of %s: %w", stream, err)
	}
	var v int64
	if err := conn.QueryRow(ctx, `SELECT r.archive_stream, r.last_seq FROM sink_positions s
		JOIN sink_positions r ON r.archive_stream = coalesce(s.current_as, s.archive_stream)
		WHERE s.archive_stream = $1`, stream).Scan(&rec, &v); err != nil {
		return 0, "", fmt.Errorf("sink: position of %s: %w", stream, err)
	}
	return uint64(v), rec, nil
}
