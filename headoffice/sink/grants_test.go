package sink

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// TestGrants sets the database up as the README says, with the shipped
// grants file, and finds that the sink's user writes with only those
// grants but can neither change nor remove a row nor the schema, and
// that the report's user reads the views and nothing else.
func TestGrants(t *testing.T) {
	pg := pgtest.Start(t)
	name := fmt.Sprintf("grants_%d", time.Now().UnixNano())
	pg.Exec(t, "postgres", `CREATE ROLE rxedge_owner LOGIN PASSWORD 'owner-pw'`)
	pg.Exec(t, "postgres", `CREATE ROLE rxedge_sink LOGIN PASSWORD 'sink-pw'`)
	pg.Exec(t, "postgres", `CREATE ROLE rxedge_report LOGIN PASSWORD 'report-pw'`)
	pg.Exec(t, "postgres", `CREATE DATABASE `+name+` OWNER rxedge_owner`)
	ctx := testContext(t)

	connect := func(user, pw string) *pgx.Conn {
		c, err := pgx.Connect(ctx, pg.URL(user, pw, name))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		return c
	}
	owner := connect("rxedge_owner", "owner-pw")
	if _, err := Migrate(ctx, owner); err != nil {
		t.Fatalf("migrate as the owner: %v", err)
	}
	grants, err := os.ReadFile(filepath.Join("..", "..", "configs", "postgres", "sink-grants.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Exec(ctx, string(grants)); err != nil {
		t.Fatalf("grants file: %v", err)
	}

	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	nc, js := archiveHub(t, srv.URL())
	m := mv("S0001", 1, payload{Type: "receive", Schedule: "CII", Quantity: "3"})
	archive(t, js, m, 0)
	archive(t, js, m, 1)
	cfg, err := pgxpool.ParseConfig(pg.URL("rxedge_sink", "sink-pw", name))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Options{Conn: nc, Postgres: cfg, UntilCaughtUp: true})
	if err != nil {
		t.Fatalf("sink as rxedge_sink: %v", err)
	}
	if c := res.Streams[0].Counts; c.Rows != 1 || c.Repeats != 1 {
		t.Fatalf("sink as rxedge_sink wrote %+v, want a row and a repeat", c)
	}
	sinkUser := connect("rxedge_sink", "sink-pw")
	if _, err := Migrate(ctx, sinkUser); err != nil {
		t.Errorf("migrate as the sink's user on a current schema: %v, want nothing to do", err)
	}
	if _, err := Verify(ctx, sinkUser, VerifyOptions{Conn: nc}); err != nil {
		t.Errorf("verify as the sink's user: %v", err)
	}

	denied := func(who string, c *pgx.Conn, sql string) {
		t.Helper()
		_, err := c.Exec(ctx, sql)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("%s: %s: error %v, want insufficient privilege (42501)", who, sql, err)
		}
	}
	for _, sql := range []string{
		`UPDATE movements SET quantity = 1`,
		`DELETE FROM movements`,
		`TRUNCATE movements`,
		`UPDATE movement_conflicts SET kept_digest = digest`,
		`DELETE FROM sink_rejects`,
		`DELETE FROM sink_positions`,
		`DROP VIEW controlled_balances`,
		`CREATE TABLE x (a int)`,
		`UPDATE movement_signs SET sign = -1`,
		`INSERT INTO sink_schema (version, name) VALUES (99, 'x')`,
	} {
		denied("rxedge_sink", sinkUser, sql)
	}
	report := connect("rxedge_report", "report-pw")
	for _, sql := range []string{
		`SELECT count(*) FROM controlled_balances`, `SELECT count(*) FROM perpetual_inventory`,
		`SELECT count(*) FROM schedule_ii_movements`, `SELECT count(*) FROM prescription_movements`,
		`SELECT count(*) FROM count_variances`, `SELECT count(*) FROM schedule_ii_reconciliation`,
		`SELECT count(*) FROM theft_loss_movements`, `SELECT count(*) FROM ndc_unit_conflicts`,
	} {
		if _, err := report.Exec(ctx, sql); err != nil {
			t.Errorf("rxedge_report: %s: %v", sql, err)
		}
	}
	for _, sql := range []string{
		`SELECT payload FROM movements`, `SELECT * FROM movement_conflicts`,
		`INSERT INTO sink_positions (archive_stream) VALUES ('x')`, `UPDATE movements SET note = 'x'`,
	} {
		denied("rxedge_report", report, sql)
	}
}

// TestShippedSettings loads the example settings file the package ships
// (hq sink --config; the service's unit runs hq run, packaging's tests
// check it) and the password files the environment names.
func TestShippedSettings(t *testing.T) {
	s, err := LoadSettings(filepath.Join("..", "..", "configs", "sink.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if s.NATS.APIPrefix != "rx.audit.api." || s.NATS.User != "audit" || s.Listen == "" || s.Batch != DefaultBatch || s.FlushInterval != DefaultFlushInterval {
		t.Errorf("example settings %+v", s)
	}
	if err := s.ApplyEnv(func(k string) string {
		return map[string]string{EnvPostgresPasswordFile: "/run/cred/pg", EnvPartitions: "4"}[k]
	}); err != nil || s.Postgres.PasswordFile != "/run/cred/pg" || s.NATS.Partitions != 4 {
		t.Errorf("ApplyEnv: %v, %+v", err, s)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("postgres:\n  password: x\n"), 0o600)
	if _, err := LoadSettings(bad); err == nil {
		t.Error("a settings file with a password in it loads")
	}
}
