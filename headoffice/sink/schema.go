package sink

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLock is the advisory lock that keeps two sinks from migrating
// at once.
const migrationLock = 0x52784564 // "RxEd"

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the schema's migrations in order.
func Migrations() ([]Migration, error) {
	ents, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range ents {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("sink: migration %s: name must start with its number", name)
		}
		b, err := migrationFiles.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(b)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("sink: migration %s: want version %d", m.Name, i+1)
		}
	}
	return out, nil
}

// SchemaVersion is the version the binary's migrations bring a database to.
func SchemaVersion() int {
	ms, err := Migrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// Migrate brings the database's schema to SchemaVersion: it applies each
// migration not yet applied, each in one transaction that also records its
// version in sink_schema, under an advisory lock so two sinks do not race.
// It returns the versions it applied. A database newer than the binary is
// an error: an older sink must not write into a schema it does not know.
func Migrate(ctx context.Context, conn *pgx.Conn) ([]int, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	// A current schema needs nothing, not even the right to create: the
	// service's user, with only its grants, starts here.
	if CheckSchema(ctx, conn) == nil {
		return nil, nil
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return nil, fmt.Errorf("sink: migrate: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS sink_schema (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("sink: migrate: %w", err)
	}
	cur, err := currentVersion(ctx, conn)
	if err != nil {
		return nil, err
	}
	if cur > len(ms) {
		return nil, fmt.Errorf("sink: the database's schema is version %d, newer than this sink's %d: upgrade the sink", cur, len(ms))
	}
	var applied []int
	for _, m := range ms[cur:] {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO sink_schema (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("sink: migration %s: %w", m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

func currentVersion(ctx context.Context, conn *pgx.Conn) (int, error) {
	var v int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM sink_schema`).Scan(&v); err != nil {
		return 0, fmt.Errorf("sink: schema version: %w", err)
	}
	return v, nil
}

// CheckSchema returns an error unless the database's schema is the one
// this binary writes.
func CheckSchema(ctx context.Context, conn *pgx.Conn) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('sink_schema') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("sink: schema version: %w", err)
	}
	if !exists {
		return fmt.Errorf("sink: the database has no sink schema: run hq sink --migrate-only")
	}
	v, err := currentVersion(ctx, conn)
	if err != nil {
		return err
	}
	if want := SchemaVersion(); v != want {
		return fmt.Errorf("sink: the database's schema is version %d, this sink writes version %d: run hq sink --migrate-only", v, want)
	}
	return nil
}
