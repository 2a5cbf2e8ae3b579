package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/natsconn"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/progress"
)

// sinkFlags are how the sink and the report reach PostgreSQL and central:
// flags over RXEDGE_SINK_* over the settings file.
type sinkFlags struct {
	nats             natsconn.Flags
	config           string
	postgres         string
	postgresPassword string
	natsPassword     string
	partitions       int
	apiPrefix        string
	listen           string
	batch            int
	set              sink.Settings
	getenv           func(string) string
	withNATS         bool
	// pg is the database's configuration, parsed by resolve.
	pg *pgxpool.Config
}

func (f *sinkFlags) register(cmd *cobra.Command, withNATS bool) {
	fs := cmd.Flags()
	fs.StringVar(&f.config, "config", "", "the sink's settings file (configs/sink.yaml)")
	fs.StringVar(&f.postgres, "postgres", "", "PostgreSQL URL, postgres://USER@HOST:PORT/DB?sslmode=… (env "+sink.EnvPostgres+"); give the password in a file")
	fs.StringVar(&f.postgresPassword, "postgres-password-file", "", "file holding the database password (env "+sink.EnvPostgresPasswordFile+")")
	f.withNATS = withNATS
	if !withNATS {
		return
	}
	f.nats.Register(fs, "")
	// The sink takes its passwords from files, never from a command line
	// every local user can read: --password is refused (resolve).
	_ = fs.MarkHidden("password")
	fs.StringVar(&f.natsPassword, "nats-password-file", "", "file holding the NATS password (env "+sink.EnvNATSPasswordFile+")")
	fs.IntVar(&f.partitions, "partitions", 0, "central's partitions: read RX_ARCHIVE and RX_ARCHIVE_<p> without listing the streams (env "+sink.EnvPartitions+"; 0: list them)")
	fs.StringVar(&f.apiPrefix, "js-api-prefix", "", "JetStream API prefix of this identity's account (rx.audit.api. for the audit user; env "+sink.EnvAPIPrefix+")")
}

// resolve merges the settings file, the environment and the flags.
func (f *sinkFlags) resolve(cmd *cobra.Command) error {
	getenv := f.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if f.withNATS && cmd.Flags().Changed("password") {
		return cli.UsageError("--password: the sink takes the NATS password only from a file (--nats-password-file F, env %s) or the variable NATS_PASSWORD, never from the command line, where every local user can read it", sink.EnvNATSPasswordFile)
	}
	if f.config != "" {
		s, err := sink.LoadSettings(f.config)
		if err != nil {
			return err
		}
		f.set = s
	}
	if err := f.set.ApplyEnv(getenv); err != nil {
		return cli.UsageError("%v", err)
	}
	fl := cmd.Flags()
	over := func(name string, dst *string, v string) {
		if fl.Changed(name) {
			*dst = v
		}
	}
	over("postgres", &f.set.Postgres.URL, f.postgres)
	over("postgres-password-file", &f.set.Postgres.PasswordFile, f.postgresPassword)
	over("nats-password-file", &f.set.NATS.PasswordFile, f.natsPassword)
	over("js-api-prefix", &f.set.NATS.APIPrefix, f.apiPrefix)
	over("listen", &f.set.Listen, f.listen)
	if fl.Changed("partitions") {
		f.set.NATS.Partitions = f.partitions
	}
	if fl.Changed("batch") {
		f.set.Batch = f.batch
	}
	if f.set.NATS.Partitions < 0 || f.set.NATS.Partitions > central.MaxPartitions {
		return cli.UsageError("--partitions must be between 1 and %d (0: list the streams)", central.MaxPartitions)
	}
	if f.set.Postgres.URL == "" {
		return cli.UsageError("--postgres URL is required (or %s, or postgres.url in --config)", sink.EnvPostgres)
	}
	var err error
	if f.pg, err = f.set.PostgresConfig(); errors.Is(err, sink.ErrSetting) {
		return cli.UsageError("--postgres: %v", err)
	} else if err != nil {
		return err
	}
	if !f.withNATS {
		return nil
	}
	// The file's NATS settings fill what neither the flags nor the nats
	// CLI's environment give.
	n, s := &f.nats, f.set.NATS
	fill := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	fill(&n.Servers, s.Servers)
	fill(&n.User, s.User)
	fill(&n.Creds, s.Creds)
	fill(&n.NKeySeed, s.NKeySeed)
	fill(&n.CA, s.CA)
	fill(&n.Cert, s.Cert)
	fill(&n.Key, s.Key)
	fill(&n.Inbox, s.InboxPrefix)
	if s.PasswordFile != "" && n.Password == "" {
		pw, err := sink.ReadSecret(s.PasswordFile)
		if err != nil {
			return err
		}
		n.Password = pw
	}
	_, err = n.Settings() // a server URL that does not parse is a usage error now, not after the database
	return err
}

func (f *sinkFlags) connectPG(ctx context.Context) (*pgx.Conn, error) {
	return sink.Connect(ctx, f.pg)
}

func (f *sinkFlags) archives() []string {
	if f.set.NATS.Partitions > 0 {
		return central.ArchiveStreams(f.set.NATS.Partitions)
	}
	return nil
}

// sinkLong is the command's help.
const sinkLong = `Copy every movement of central's archives into PostgreSQL, exactly once.

Every archive stream (RX_ARCHIVE, or RX_ARCHIVE_<p> on a partitioned
central) is read in order with an ordered consumer, from the position the
database holds for it (table sink_positions), and written in batches: one
row per (store_id, key) in the table movements. A movement archived again
with the same content is a repeat (movement_repeats), with other content a
conflict (movement_conflicts: the kept row is never overwritten), and a
message that is not a well-formed movement a reject (sink_rejects, naming
the header or field). The position is written in the same transaction as
the rows, so a kill -9, a PostgreSQL restart or failover, or a NATS leader
change never loses or doubles a row: the sink resumes from the database.

The schema is the sink's (versioned migrations): the sink applies what is
missing at start; --migrate-only applies it and exits (run it as the
schema's owner when the service's user has only its grants; see README).

Without --until-caught-up the sink follows the archives until stopped,
serving /metrics and /readyz on --listen. --until-caught-up stops once every
archive's position reaches the last sequence it had at start.

--verify compares the database with the archives, message by message (the
store, key, digest and sequence of each), per store (counts, highest
sequence), and every stored payload with its digest; exit 3 on any
difference, or when the sink is behind the archives (unless --allow-lag).

Settings: flags, else RXEDGE_SINK_* variables, else --config FILE (YAML,
configs/sink.yaml). Passwords only from files (--postgres-password-file,
--nats-password-file) or NATS_PASSWORD; never echoed. Connect as the audit
user of the production configuration: --js-api-prefix rx.audit.api. and
--partitions N.

Exit status: 0 done; 1 error; 2 usage; 3 --verify found a difference.`

// sinkCmd is hq sink's flags and run.
type sinkCmd struct {
	f                                                  sinkFlags
	untilCaught, verify, allowLag, migrateOnly, asJSON bool
	log                                                *slog.Logger
}

func newSinkCmd(s *cli.Streams) *cobra.Command {
	var c sinkCmd
	cmd := &cobra.Command{
		Use:   "sink --postgres URL [--postgres-password-file F] [--config F] [--until-caught-up | --verify | --migrate-only] --server URL [auth flags]",
		Short: "Copy central's archives into PostgreSQL exactly once, and keep following them",
		Long:  sinkLong,
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return c.run(cmd, s) },
	}
	c.f.register(cmd, true)
	fs := cmd.Flags()
	fs.BoolVar(&c.untilCaught, "until-caught-up", false, "stop once every archive is written up to the last sequence it had at start")
	fs.BoolVar(&c.verify, "verify", false, "compare the database with the archives; exit 3 on a difference")
	fs.BoolVar(&c.allowLag, "allow-lag", false, "with --verify: messages not yet written are not a difference")
	fs.BoolVar(&c.migrateOnly, "migrate-only", false, "create or migrate the schema, then exit")
	fs.StringVar(&c.f.listen, "listen", "", "serve /metrics and /readyz here, e.g. 127.0.0.1:9465 (env "+sink.EnvListen+")")
	fs.IntVar(&c.f.batch, "batch", sink.DefaultBatch, "archive messages per transaction")
	fs.BoolVar(&c.asJSON, "json", false, "print the result as JSON")
	return cmd
}

func (c *sinkCmd) run(cmd *cobra.Command, s *cli.Streams) error {
	if n := btoi(c.untilCaught) + btoi(c.verify) + btoi(c.migrateOnly); n > 1 {
		return cli.UsageError("give one of --until-caught-up, --verify and --migrate-only")
	}
	if err := c.f.resolve(cmd); err != nil {
		return err
	}
	ctx := cmd.Context()
	c.log = newLogger(s.Err)
	conn, err := c.connectPG(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if !c.verify {
		applied, err := sink.Migrate(ctx, conn)
		if err != nil {
			return err
		}
		if len(applied) > 0 {
			c.log.Info("migrated the schema", "applied", cli.Numbers(applied), "version", sink.SchemaVersion())
		}
		if c.migrateOnly {
			if c.asJSON {
				return cli.PrintJSON(s.Out, map[string]any{"version": sink.SchemaVersion(), "applied": applied})
			}
			fmt.Fprintf(s.Out, "schema at version %d (applied %d migration(s))\n", sink.SchemaVersion(), len(applied))
			return nil
		}
	}
	nc, err := c.f.nats.Connect("rxedge-sink")
	if err != nil {
		return err
	}
	defer nc.Close()
	if c.verify {
		return runVerify(ctx, s, conn, nc, &c.f, c.allowLag, c.asJSON)
	}
	conn.Close(ctx)
	return c.follow(ctx, s, nc)
}

// connectPG connects to PostgreSQL; a service (following the archives)
// waits for its database, a one-off command does not.
func (c *sinkCmd) connectPG(ctx context.Context) (*pgx.Conn, error) {
	conn, err := c.f.connectPG(ctx)
	for attempt := 0; err != nil && !c.verify && !c.migrateOnly && sink.Retryable(err); attempt++ {
		if attempt%10 == 0 {
			c.log.Warn("cannot reach PostgreSQL yet; retrying", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(sink.Backoff(attempt)):
		}
		conn, err = c.f.connectPG(ctx)
	}
	return conn, err
}

// follow runs the sink, serving /metrics and /readyz when --listen is set.
func (c *sinkCmd) follow(ctx context.Context, s *cli.Streams, nc *nats.Conn) error {
	m := sink.NewMetrics()
	if c.f.set.Listen != "" {
		l, err := net.Listen("tcp", c.f.set.Listen)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(l)
		defer srv.Close()
		c.log.Info("serving /metrics and /readyz", "listen", l.Addr().String())
	}
	res, err := sink.Run(ctx, sink.Options{
		Conn: nc, APIPrefix: c.f.set.NATS.APIPrefix, Archives: c.f.archives(), Postgres: c.f.pg,
		Batch: c.f.set.Batch, FlushInterval: c.f.set.FlushInterval, UntilCaughtUp: c.untilCaught,
		Logger: c.log, Metrics: m,
	})
	if err != nil && !(errors.Is(err, context.Canceled) && !c.untilCaught) {
		return err
	}
	if c.asJSON {
		return cli.PrintJSON(s.Out, res)
	}
	return res.WriteText(s.Out)
}

func runVerify(ctx context.Context, s *cli.Streams, conn *pgx.Conn, nc *nats.Conn, f *sinkFlags, allowLag, asJSON bool) error {
	bars := progress.NewPhases(s.Err, "messages")
	v, err := sink.Verify(ctx, conn, sink.VerifyOptions{
		Conn: nc, APIPrefix: f.set.NATS.APIPrefix, Archives: f.archives(), AllowLag: allowLag,
		Progress: func(stream string, done, total uint64) { bars.Update("verify "+stream, done, total) },
	})
	bars.Done()
	if err != nil {
		return err
	}
	if asJSON {
		if err := cli.PrintJSON(s.Out, v); err != nil {
			return err
		}
	} else if err := v.WriteText(s.Out); err != nil {
		return err
	}
	if !v.OK() {
		return &cli.Error{Code: cli.ExitAttention}
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// reportLong is the command's help.
const reportLong = `Print one of the views the sink's schema ships (see README, "Head office's
records in PostgreSQL"):

  balances     each controlled NDC's balance per store now (perpetual
               inventory: receipts, returns, transfers in and adjustments
               add; dispenses, waste and transfers out subtract)
  inventory    every controlled movement of --store with the running
               balance of its NDC after it (--ndc, --from, --to narrow it)
  schedule-ii  every Schedule II movement of --store in [--from, --to),
               with its DEA Form 222 / CSOS number where given
  rx           the movements of one prescription reference (--rx-ref)

Connect as a user with SELECT on the views (see the grants in README).`

func newReportCmd(s *cli.Streams) *cobra.Command {
	var (
		f        sinkFlags
		q        sink.ReportQuery
		from, to string
		asJSON   bool
		asCSV    bool
	)
	cmd := &cobra.Command{
		Use:   "report (balances | inventory | schedule-ii | rx) [--store ID] [--ndc NDC] [--rx-ref REF] [--from T] [--to T] [--json|--csv] --postgres URL",
		Short: "Print the inspection views the sink keeps in PostgreSQL",
		Long:  reportLong,
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON && asCSV {
				return cli.UsageError("give --json or --csv, not both")
			}
			q.Kind = args[0]
			switch q.Kind {
			case sink.ReportBalances, sink.ReportInventory, sink.ReportScheduleII, sink.ReportRx:
			default:
				return cli.UsageError("report %q: give balances, inventory, schedule-ii or rx", q.Kind)
			}
			if (q.Kind == sink.ReportInventory || q.Kind == sink.ReportScheduleII) && q.Store == "" {
				return cli.UsageError("report %s: --store ID is required", q.Kind)
			}
			if q.Kind == sink.ReportRx && q.RxRef == "" {
				return cli.UsageError("report rx: --rx-ref REF is required")
			}
			now := time.Now()
			for _, t := range []struct {
				name, v string
				dst     *time.Time
			}{{"--from", from, &q.From}, {"--to", to, &q.To}} {
				if t.v == "" {
					continue
				}
				v, err := cli.ParseTime(t.v, now)
				if err != nil {
					return cli.UsageError("%s: %v", t.name, err)
				}
				*t.dst = v
			}
			if err := f.resolve(cmd); err != nil {
				return err
			}
			conn, err := f.connectPG(cmd.Context())
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(cmd.Context()))
			t, err := sink.Report(cmd.Context(), conn, q)
			if err != nil {
				return err
			}
			switch {
			case asJSON:
				return t.WriteJSON(s.Out)
			case asCSV:
				return t.WriteCSV(s.Out)
			default:
				return t.WriteTable(s.Out)
			}
		},
	}
	f.register(cmd, false)
	fs := cmd.Flags()
	fs.StringVar(&q.Store, "store", "", "the store")
	fs.StringVar(&q.NDC, "ndc", "", "one NDC")
	fs.StringVar(&q.RxRef, "rx-ref", "", "the prescription reference (rx)")
	fs.StringVar(&from, "from", "", "from this time (RFC 3339, a date, or a duration before now such as 30d)")
	fs.StringVar(&to, "to", "", "until this time, not included")
	fs.IntVar(&q.Limit, "limit", 0, "at most this many rows (0: all)")
	fs.BoolVar(&asJSON, "json", false, "print a JSON array of objects")
	fs.BoolVar(&asCSV, "csv", false, "print CSV with a header line")
	return cmd
}
