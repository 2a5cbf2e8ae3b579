package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
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
	"github.com/rxedge/agent/internal/secret"
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
		pw, err := secret.ReadFile(s.PasswordFile)
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
	connectTimeout                                     time.Duration
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
	fs.DurationVar(&c.connectTimeout, "connect-timeout", sink.DefaultBatchConnectTimeout,
		"with --until-caught-up, --verify or --migrate-only: fail when PostgreSQL or central does not answer within this (connect_timeout in --config)")
	return cmd
}

// batch says the run ends by itself: it fails when PostgreSQL or central
// cannot be reached within the connect timeout instead of waiting.
func (c *sinkCmd) batch() bool { return c.untilCaught || c.verify || c.migrateOnly }

// bound is the connect timeout of a batch run: the flag, else the
// settings file's, else the default; zero for the service.
func (c *sinkCmd) bound(cmd *cobra.Command) (time.Duration, error) {
	if !c.batch() {
		return 0, nil
	}
	d := c.connectTimeout
	if !cmd.Flags().Changed("connect-timeout") && c.f.set.ConnectTimeout != 0 {
		d = c.f.set.ConnectTimeout
	}
	if d <= 0 {
		return 0, cli.UsageError("--connect-timeout must be positive")
	}
	return d, nil
}

func (c *sinkCmd) run(cmd *cobra.Command, s *cli.Streams) error {
	if n := btoi(c.untilCaught) + btoi(c.verify) + btoi(c.migrateOnly); n > 1 {
		return cli.UsageError("give one of --until-caught-up, --verify and --migrate-only")
	}
	if err := c.f.resolve(cmd); err != nil {
		return err
	}
	bound, err := c.bound(cmd)
	if err != nil {
		return err
	}
	c.connectTimeout = bound
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

// connectPG connects to PostgreSQL. A service (following the archives)
// waits for its database; --until-caught-up waits at most the connect
// timeout, and --verify and --migrate-only try once, within it.
func (c *sinkCmd) connectPG(ctx context.Context) (*pgx.Conn, error) {
	if c.batch() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.connectTimeout)
		defer cancel()
	}
	conn, err := c.f.connectPG(ctx)
	for attempt := 0; err != nil && !c.verify && !c.migrateOnly && sink.Retryable(err); attempt++ {
		if attempt%10 == 0 {
			c.log.Warn("cannot reach PostgreSQL yet; retrying", "error", err)
		}
		t := time.NewTimer(sink.Backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			if c.batch() && ctx.Err() == context.DeadlineExceeded {
				return nil, fmt.Errorf("%w (%s, --connect-timeout): %w: check the URL, the server and its TLS settings", sink.ErrUnreachable, c.connectTimeout, err)
			}
			return nil, ctx.Err()
		case <-t.C:
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
		Logger: c.log, Metrics: m, ConnectTimeout: c.connectTimeout,
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
const reportLong = `Print one of the views the sink's schema ships (see docs/headoffice.md, "Head office's
records in PostgreSQL"):

  balances        each controlled NDC's balance per store now (perpetual
                  inventory: receipts, returns, transfers in and adjustments
                  in add; dispenses, waste, transfers out and adjustments
                  out subtract)
  inventory       every controlled movement of --store with the running
                  balance of its NDC after it (--ndc and the period narrow it)
  schedule-ii     every Schedule II movement of --store in the period, with
                  its DEA Form 222 / CSOS number where given
  rx              the movements of one prescription reference (--rx-ref)
  counts          every physical count with the book at its time, the
                  variance and what moved since the previous count
  reconciliation  the quarterly Schedule II reconciliation of 16 CCR 1715.65
                  for --store (--quarter 2026Q1), with its report's due dates
  form-106        a draft of DEA Form 106 for each theft or loss of a
                  controlled substance, and when its notices are due
  units           each store's NDCs seen in more than one unit

The period is --from/--to (from included, to not), or --quarter 2026Q1
(January to March 2026, UTC); balances is as of now and takes none.
--ndc takes an NDC in any spelling (4-4-2, 5-3-2 or 5-4-1 with hyphens,
11 digits as 5-4-2; a bare 10-digit NDC finds each product it may stand
for).

Exit status: 0 printed; 1 when the report fails, or --ndc matches no row
(said on stderr, the empty report on stdout); 2 for a usage error (a
report kind not listed, --store missing, a bad --ndc or --quarter).
Connect as a user with SELECT on the views (see the grants in README).`

// reportFlags are hq report's flags.
type reportFlags struct {
	f                 sinkFlags
	q                 sink.ReportQuery
	from, to, quarter string
	asJSON, asCSV     bool
}

func newReportCmd(s *cli.Streams) *cobra.Command {
	var r reportFlags
	cmd := &cobra.Command{
		Use:   "report (" + strings.Join(sink.Reports, " | ") + ") [--store ID] [--ndc NDC] [--rx-ref REF] [--from T] [--to T | --quarter 2026Q1] [--json|--csv] --postgres URL",
		Short: "Print the inspection views the sink keeps in PostgreSQL",
		Long:  reportLong,
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE:  func(cmd *cobra.Command, args []string) error { return r.run(cmd, s, args[0]) },
	}
	r.f.register(cmd, false)
	fs := cmd.Flags()
	fs.StringVar(&r.q.Store, "store", "", "the store (required for inventory, schedule-ii and reconciliation)")
	fs.StringVar(&r.q.NDC, "ndc", "", "one NDC, in any spelling")
	fs.StringVar(&r.q.RxRef, "rx-ref", "", "the prescription reference (rx)")
	fs.StringVar(&r.from, "from", "", "from this time (RFC 3339, a date, or a duration before now such as 30d)")
	fs.StringVar(&r.to, "to", "", "until this time, not included")
	fs.StringVar(&r.quarter, "quarter", "", "the period is this calendar quarter, UTC: 2026Q1 (instead of --from and --to)")
	fs.IntVar(&r.q.Limit, "limit", 0, "at most this many rows (0: all)")
	fs.BoolVar(&r.asJSON, "json", false, "print a JSON array of objects")
	fs.BoolVar(&r.asCSV, "csv", false, "print CSV with a header line")
	return cmd
}

// query checks the command line and fills in the query of report kind:
// every refusal is a usage error, given before anything connects.
func (r *reportFlags) query(kind string) error {
	q := &r.q
	q.Kind = kind
	switch {
	case r.asJSON && r.asCSV:
		return cli.UsageError("give --json or --csv, not both")
	case !slices.Contains(sink.Reports, kind):
		return cli.UsageError("report %q: give one of %s", kind, strings.Join(sink.Reports, ", "))
	case (kind == sink.ReportInventory || kind == sink.ReportScheduleII || kind == sink.ReportReconciliation) && q.Store == "":
		return cli.UsageError("report %s: --store ID is required", kind)
	case kind == sink.ReportRx && q.RxRef == "":
		return cli.UsageError("report rx: --rx-ref REF is required")
	}
	if q.NDC != "" {
		if err := sink.CheckNDC(q.NDC); err != nil {
			return cli.UsageError("report %s: %v", kind, err)
		}
	}
	return r.period()
}

// period reads --quarter, or --from and --to.
func (r *reportFlags) period() error {
	q := &r.q
	if r.quarter != "" {
		if r.from != "" || r.to != "" {
			return cli.UsageError("give --quarter or --from/--to, not both")
		}
		var err error
		if q.From, q.To, err = sink.QuarterBounds(r.quarter); err != nil {
			return cli.UsageError("--quarter: %v", err)
		}
	}
	now := time.Now()
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"--from", r.from, &q.From}, {"--to", r.to, &q.To}} {
		if t.v == "" {
			continue
		}
		v, err := cli.ParseTime(t.v, now)
		if err != nil {
			return cli.UsageError("%s: %v", t.name, err)
		}
		*t.dst = v
	}
	if q.Kind == sink.ReportBalances && (!q.From.IsZero() || !q.To.IsZero()) {
		return cli.UsageError("report balances is as of now: it takes no period (the inventory report takes one)")
	}
	return nil
}

func (r *reportFlags) run(cmd *cobra.Command, s *cli.Streams, kind string) error {
	if err := r.query(kind); err != nil {
		return err
	}
	if err := r.f.resolve(cmd); err != nil {
		return err
	}
	conn, err := r.f.connectPG(cmd.Context())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(cmd.Context()))
	t, err := sink.Report(cmd.Context(), conn, r.q)
	if err != nil {
		return err
	}
	switch {
	case r.asJSON:
		err = t.WriteJSON(s.Out)
	case r.asCSV:
		err = t.WriteCSV(s.Out)
	default:
		err = t.WriteTable(s.Out)
	}
	if err != nil {
		return err
	}
	if r.q.NDC != "" && len(t.Rows) == 0 {
		return &cli.Error{Code: cli.ExitError, Msg: fmt.Sprintf("report %s: no rows match --ndc %s%s: check the NDC, the store and the period", kind, r.q.NDC, r.scope())}
	}
	return nil
}

// scope names the store and the period a report was narrowed to, for
// the message of an NDC that matched nothing.
func (r *reportFlags) scope() string {
	var b strings.Builder
	if r.q.Store != "" {
		fmt.Fprintf(&b, " at store %s", r.q.Store)
	}
	if !r.q.From.IsZero() {
		fmt.Fprintf(&b, " from %s", r.q.From.UTC().Format(time.RFC3339))
	}
	if !r.q.To.IsZero() {
		fmt.Fprintf(&b, " until %s", r.q.To.UTC().Format(time.RFC3339))
	}
	return b.String()
}
