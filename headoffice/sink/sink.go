package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/internal/redact"
)

// Defaults of Options.
const (
	DefaultBatch         = 5000
	DefaultFlushInterval = 200 * time.Millisecond
	// InFlightBound bounds the commit of the batch being written when
	// Run is asked to stop: it is finished, not aborted.
	InFlightBound = 15 * time.Second
	// maxBackoff caps the wait between attempts at a failing write.
	maxBackoff = 5 * time.Second
)

// Options configure Run.
type Options struct {
	// Conn reaches central as an identity that may read the archives (the
	// production configuration's audit user).
	Conn *nats.Conn
	// APIPrefix is the JetStream API prefix of Conn's account
	// (central.AuditAPIPrefix for the audit user); empty for the default.
	APIPrefix string
	// Archives names the archive streams to read, those that exist; nil
	// lists the server's streams (an identity that may).
	Archives []string
	// Postgres is the database's connection configuration.
	Postgres *pgxpool.Config
	// Batch bounds the messages of one transaction (DefaultBatch).
	Batch int
	// FlushInterval is how long a partial batch waits for more messages
	// before it is written (DefaultFlushInterval).
	FlushInterval time.Duration
	// UntilCaughtUp ends Run once every archive's position reaches the
	// last sequence the archive held when Run started.
	UntilCaughtUp bool
	// Logger receives what the sink does; nil discards it.
	Logger *slog.Logger
	// Metrics, when set, is kept up to date.
	Metrics *Metrics
	// ConnectTimeout, when positive, bounds how long the database or
	// central may go on failing to answer: past it Run ends with
	// ErrUnreachable. A batch run sets it (--connect-timeout); zero, a
	// service's, retries until ctx ends.
	ConnectTimeout time.Duration
}

// ErrUnreachable is Run's error when, with Options.ConnectTimeout, the
// database or central did not answer within it: a batch run ends with
// it rather than waiting.
var ErrUnreachable = errors.New("not reached within the connect timeout")

// retrying paces the attempts at something failing: a capped, jittered
// backoff until ctx ends or, with Options.ConnectTimeout, until the
// failures have gone on that long. A streak starts at its first failure.
type retrying struct {
	o     *Options
	what  string
	since time.Time
	n     int
}

// again waits before the next attempt after err, or returns why there is
// none: ctx's error, or ErrUnreachable once the streak has lasted the
// bound. Its text is the database's scrubbed (safeErr).
func (r *retrying) again(ctx context.Context, err error) error {
	if r.n == 0 {
		r.since = time.Now()
	}
	d := backoff(r.n)
	r.n++
	if b := r.o.ConnectTimeout; b > 0 {
		left := b - time.Since(r.since)
		if left <= 0 {
			return fmt.Errorf("sink: %s: %w (%s): %s", r.what, ErrUnreachable, b, r.o.safeErr(err))
		}
		d = min(d, left)
	}
	if !sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// bounded is ctx bounded by what is left of the streak's ConnectTimeout,
// so that one attempt cannot outlast it.
func (r *retrying) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.o.ConnectTimeout <= 0 {
		return ctx, func() {}
	}
	since := r.since
	if r.n == 0 {
		since = time.Now()
	}
	return context.WithDeadline(ctx, since.Add(r.o.ConnectTimeout))
}

func (o *Options) defaults() {
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
}

// Result is what Run wrote, per archive stream.
type Result struct {
	Streams []StreamResult `json:"streams"`
}

// StreamResult is one archive stream's part of a Result.
type StreamResult struct {
	Name     string `json:"name"`
	Position uint64 `json:"position"`
	// Recreated, when set, says the stream was found created again: its
	// rows are now recorded under this name (archive_stream).
	Recreated string `json:"recreated,omitempty"`
	Counts
}

// NewPool opens a pool on cfg whose connections each have the staging
// table.
func NewPool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	cfg = cfg.Copy()
	prev := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if prev != nil {
			if err := prev(ctx, c); err != nil {
				return err
			}
		}
		_, err := c.Exec(ctx, stageDDL)
		return err
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Run copies the archives into the database until ctx ends or, with
// UntilCaughtUp, until it has caught up. The schema must be current
// (CheckSchema). A failing database or NATS connection is retried, with a
// bounded backoff, from the position the database holds; only a cancelled
// context ends Run early, or an archive that cannot be found.
func Run(ctx context.Context, o Options) (Result, error) {
	o.defaults()
	var res Result
	js, err := jetStream(o.Conn, o.APIPrefix)
	if err != nil {
		return res, err
	}
	pool, err := NewPool(ctx, o.Postgres)
	if err != nil {
		return res, fmt.Errorf("sink: postgres: %w", err)
	}
	defer pool.Close()
	if err := retryDB(ctx, o, "check the schema", func(ctx context.Context) error {
		return pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error { return CheckSchema(ctx, c.Conn()) })
	}); err != nil {
		return res, err
	}
	// Central may be electing a leader, or not reachable yet: the archives
	// are asked for until they answer.
	var names []string
	r := retrying{o: &o, what: "list the archives"}
	for {
		actx, cancel := r.bounded(ctx)
		names, err = streams.Archives(actx, js, o.Archives)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		if r.n%10 == 0 {
			o.Logger.Warn("cannot list the archives yet; retrying", "error", err)
		}
		if err = r.again(ctx, err); err != nil {
			break
		}
	}
	if err != nil {
		return res, err
	}
	if len(names) == 0 {
		return res, errors.New("sink: no archive stream found")
	}
	res.Streams = make([]StreamResult, len(names))
	g, gctx := errgroup.WithContext(ctx)
	for i, name := range names {
		res.Streams[i].Name = name
		f := &follower{o: o, js: js, pool: pool, name: name, out: &res.Streams[i]}
		g.Go(func() error { return f.run(gctx) })
	}
	o.Metrics.setReady(true)
	err = g.Wait()
	o.Metrics.setReady(false)
	return res, err
}

func jetStream(nc *nats.Conn, prefix string) (jetstream.JetStream, error) {
	if nc == nil {
		return nil, errors.New("sink: no NATS connection")
	}
	if prefix != "" {
		return jetstream.NewWithAPIPrefix(nc, prefix)
	}
	return jetstream.New(nc)
}

// follower copies one archive stream. Its state is owned by its run
// goroutine; the reader goroutine only hands it messages.
type follower struct {
	o    Options
	js   jetstream.JetStream
	pool *pgxpool.Pool
	name string
	out  *StreamResult
	pos  uint64
	// stage says the next batch goes through the staging table without
	// trying a direct COPY first.
	stage bool
	// created is when the stream the position is of was created; rec
	// is the position row its rows are recorded under (startAgain).
	created time.Time
	rec     string
}

// errRecreated says the stream was created again while it was followed:
// the session starts again, and checkCreated finds it.
var errRecreated = errors.New("sink: the archive stream was created again")

// errRewind says the database holds an earlier position than the
// follower had written (a failover to a standby that had not received
// the last commits): the archive is read again from there.
var errRewind = errors.New("sink: the stored position went back")

func (f *follower) run(ctx context.Context) error {
	for {
		err := f.session(ctx)
		if errors.Is(err, errRecreated) {
			continue
		}
		if !errors.Is(err, errRewind) {
			return err
		}
		f.o.Logger.Warn("the stored position went back; reading the archive again from it", "archive", f.name)
	}
}

// session reads the position and follows the archive from it.
func (f *follower) session(ctx context.Context) error {
	log := f.o.Logger.With("archive", f.name)
	target, done, err := f.start(ctx, log)
	if err != nil || done {
		return err
	}

	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	msgs := make(chan Row, f.o.Batch)
	readErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		readErr <- f.read(cctx, msgs)
	}()
	go func() {
		defer wg.Done()
		f.watchLag(cctx, cancel)
	}()
	defer wg.Wait()
	defer cancel(nil)
	err = f.follow(ctx, log, target, msgs, readErr)
	if c := context.Cause(cctx); ctx.Err() == nil && errors.Is(c, errRecreated) {
		return c
	}
	return err
}

// start reads the stored position and the archive's last sequence, the
// target of a sink that stops when caught up; done says it already is.
func (f *follower) start(ctx context.Context, log *slog.Logger) (target uint64, done bool, err error) {
	if err := retryDB(ctx, f.o, "read the position of "+f.name, func(ctx context.Context) error {
		return f.pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
			p, rec, err := ensurePosition(ctx, c.Conn(), f.name)
			f.pos, f.rec = p, rec
			return err
		})
	}); err != nil {
		return 0, false, err
	}
	f.out.Position = f.pos
	m := f.o.Metrics
	m.position(f.name, f.pos)
	info, err := f.streamInfo(ctx)
	if err != nil {
		return 0, false, err
	}
	if err := f.checkCreated(ctx, log, info); err != nil {
		return 0, false, err
	}
	st := info.State
	target = st.LastSeq
	m.archiveLast(f.name, st.LastSeq)
	if f.o.UntilCaughtUp && f.pos >= target {
		log.Info("caught up", "position", f.pos)
		return target, true, nil
	}
	log.Info("following", "position", f.pos, "archive_last", st.LastSeq)
	return target, false, nil
}

// follow gathers the rows read after the position into batches and writes
// each when full, when FlushInterval has passed since its first row, or
// when it reaches target and the sink stops once caught up.
func (f *follower) follow(ctx context.Context, log *slog.Logger, target uint64, msgs <-chan Row, readErr <-chan error) error {
	batch := make([]Row, 0, f.o.Batch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("sink: read %s: %w", f.name, err)
		case r := <-msgs:
			if r.StreamSeq <= f.pos {
				continue
			}
			if len(batch) == 0 {
				timer.Reset(f.o.FlushInterval)
			}
			batch = append(batch, r)
			if len(batch) < f.o.Batch && !(f.o.UntilCaughtUp && r.StreamSeq >= target) {
				continue
			}
			timer.Stop()
		case <-timer.C:
		}
		if len(batch) > 0 {
			err := f.write(ctx, batch)
			batch = batch[:0]
			if err != nil {
				return err
			}
		}
		if f.o.UntilCaughtUp && f.pos >= target {
			log.Info("caught up", "position", f.pos)
			return nil
		}
	}
}

func (f *follower) streamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	r := retrying{o: &f.o, what: "read the state of " + f.name}
	for {
		actx, cancel := r.bounded(ctx)
		s, err := f.js.Stream(actx, f.name)
		cancel()
		if err == nil {
			return s.CachedInfo(), nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("sink: stream %s: %w", f.name, err)
		}
		f.o.Logger.Warn("archive info failed; retrying", "archive", f.name, "error", err)
		if err := r.again(ctx, err); err != nil {
			return nil, err
		}
	}
}

// checkCreated compares the stream's creation time with the one stored
// with the position. A stream created again (deleted and recreated by
// central's administrator) starts its sequences again at 1: following it
// from the old position would skip every new message up to it. The sink
// then records the new stream's rows under a position row of their own
// (startAgain), reads it from its start, and says so once: a
// warning, rxedge_sink_archive_recreated_total, the run's result, and
// hq sink --verify. A movement of the new stream already written is a
// repeat: each key is still written once.
func (f *follower) checkCreated(ctx context.Context, log *slog.Logger, info *jetstream.StreamInfo) error {
	created := info.Created.UTC().Truncate(time.Microsecond) // PostgreSQL keeps microseconds
	var stored *time.Time
	if err := retryDB(ctx, f.o, "read the creation time of "+f.name, func(ctx context.Context) error {
		return f.pool.QueryRow(ctx, `SELECT archive_created FROM sink_positions WHERE archive_stream = $1`, f.rec).Scan(&stored)
	}); err != nil {
		return err
	}
	switch {
	case stored != nil && stored.Equal(created):
		f.created = created
		return nil
	case stored == nil && f.pos <= info.State.LastSeq:
		// A position stored before the creation time was: it is of
		// this stream, unless it was recreated as long or longer since
		// (which nothing stored can tell).
		f.created = created
		return retryDB(ctx, f.o, "store the creation time of "+f.name, func(ctx context.Context) error {
			_, err := f.pool.Exec(ctx, `UPDATE sink_positions SET archive_created = $2 WHERE archive_stream = $1 AND archive_created IS NULL`, f.rec, created)
			return err
		})
	}
	rec := f.name + "@" + created.Format(time.RFC3339Nano)
	log.Warn("SINK_ARCHIVE_RECREATED: the archive stream was created again since the sink read it; it is read from its start",
		"position", f.pos, "archive_last", info.State.LastSeq, "created", created, "earlier_rows_as", f.rec, "rows_as", rec)
	if err := retryDB(ctx, f.o, "start the position of the recreated "+f.name, func(ctx context.Context) error {
		return f.pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error { return startAgain(ctx, c.Conn(), f.name, rec, created) })
	}); err != nil {
		return err
	}
	f.pos, f.created, f.rec = 0, created, rec
	f.out.Position, f.out.Recreated = 0, rec
	f.o.Metrics.recreated(f.name)
	return nil
}

// watchLag refreshes the archive's last sequence for the lag metric, and
// pings the database for readiness. A stream created again since the
// session started ends it (errRecreated).
func (f *follower) watchLag(ctx context.Context, end context.CancelCauseFunc) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, err := f.js.Stream(ctx, f.name)
		if err == nil {
			f.o.Metrics.archiveLast(f.name, s.CachedInfo().State.LastSeq)
			if !s.CachedInfo().Created.UTC().Truncate(time.Microsecond).Equal(f.created) {
				end(errRecreated)
				return
			}
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = f.pool.Ping(pctx)
		cancel()
		if ctx.Err() == nil {
			f.o.Metrics.dbState(err == nil)
		}
	}
}

// read delivers the archive's messages after the position with an ordered
// consumer, which recreates itself after a leader change or a reconnect
// from the last sequence it delivered.
func (f *follower) read(ctx context.Context, out chan<- Row) error {
	cfg := jetstream.OrderedConsumerConfig{InactiveThreshold: time.Minute}
	if f.pos > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, f.pos+1
	}
	var cons jetstream.Consumer
	r := retrying{o: &f.o, what: "read " + f.name}
	for {
		var err error
		cons, err = f.js.OrderedConsumer(ctx, f.name, cfg)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f.o.Logger.Warn("archive consumer failed; retrying", "archive", f.name, "error", err)
		if err := r.again(ctx, err); err != nil {
			return err
		}
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * f.o.Batch))
	if err != nil {
		return err
	}
	defer it.Stop()
	errs := 0
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, nats.ErrConnectionClosed) {
				return err
			}
			f.o.Logger.Warn("archive read failed; the consumer resumes", "archive", f.name, "error", err)
			errs++
			if !sleep(ctx, backoff(min(errs, 4))) {
				return ctx.Err()
			}
			continue
		}
		errs = 0
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		r := parseRow(f.rec, meta.Sequence.Stream, meta.Timestamp, m.Subject(), m.Headers(), m.Data())
		select {
		case out <- r:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// write commits batch and moves the position, retrying a failing database
// from the position it then holds.
func (f *follower) write(ctx context.Context, batch []Row) error {
	log := f.o.Logger.With("archive", f.name)
	r := retrying{o: &f.o, what: "write " + f.name}
	for attempt := 0; ; attempt++ {
		rows := batch
		for len(rows) > 0 && rows[0].StreamSeq <= f.pos {
			rows = rows[1:]
		}
		if len(rows) == 0 {
			return nil
		}
		start := time.Now()
		var c Counts
		var staged bool
		// A stop asked while the batch is written does not abort it: the
		// transaction in flight commits (within InFlightBound), and no
		// other starts.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), InFlightBound)
		err := f.pool.AcquireFunc(wctx, func(conn *pgxpool.Conn) error {
			var err error
			c, staged, err = writeBatch(wctx, conn.Conn(), f.rec, f.pos, rows, !f.stage)
			return err
		})
		cancel()
		if err == nil {
			// After a batch that held a key already written, the next
			// ones are staged until one holds none: a run of repeats
			// does not pay for a refused COPY each time.
			f.stage = staged && c.Repeats+c.Conflicts > 0
			f.pos = rows[len(rows)-1].StreamSeq
			f.out.Position = f.pos
			f.out.Counts.add(c)
			f.o.Metrics.committed(f.name, f.pos, c, staged, time.Since(start))
			if c.Rejects > 0 {
				f.setAside(log, rows)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f.o.Metrics.failed(f.name)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && !retryable(pe) {
			return fmt.Errorf("sink: write %s: %s", f.name, f.o.safeErr(err))
		}
		if !errors.Is(err, ErrPositionMoved) {
			log.Warn("write failed; retrying from the stored position", "error", f.o.safeErr(err), "attempt", attempt+1)
			if err := r.again(ctx, err); err != nil {
				return err
			}
		}
		// The commit may have happened (its answer lost) or another sink
		// may have moved on: the database says where to go on from.
		var p uint64
		var rec string
		err = f.pool.AcquireFunc(ctx, func(conn *pgxpool.Conn) error {
			var err error
			p, rec, err = ensurePosition(ctx, conn.Conn(), f.name)
			return err
		})
		switch {
		case err != nil:
			log.Warn("read the position failed", "error", f.o.safeErr(err))
		case rec != f.rec:
			// Another sink found the stream created again.
			return errRecreated
		case p < f.pos:
			log.Warn("the stored position is behind the last commit (a failover to a standby that missed commits)",
				"committed", f.pos, "stored", p)
			f.o.Metrics.rewound(f.name, p)
			f.pos = p
			return errRewind
		default:
			f.pos = p
		}
	}
}

// setAside reports the rejects of a committed batch: counted by reason
// (rxedge_sink_rejects_total) and logged in one line per batch, however
// many it held, with the archive sequences of the first few. The messages
// stay in the archive; sink_rejects says where.
func (f *follower) setAside(log *slog.Logger, rows []Row) {
	reasons := map[string]uint64{}
	var seqs []uint64
	for _, r := range rows {
		if r.Reject == "" {
			continue
		}
		reasons[r.Reject]++
		if len(seqs) < 5 {
			seqs = append(seqs, r.StreamSeq)
		}
	}
	f.o.Metrics.rejected(f.name, reasons)
	names := slices.Sorted(maps.Keys(reasons))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s: %d", n, reasons[n])
	}
	first := make([]string, len(seqs))
	for i, q := range seqs {
		first[i] = strconv.FormatUint(q, 10)
	}
	log.Warn("set aside archive messages the sink cannot take (see sink_rejects)",
		"reasons", strings.Join(parts, ", "), "first_archive_seqs", strings.Join(first, ", "))
}

// retryDB runs fn until it succeeds, ctx ends or, with
// o.ConnectTimeout, the failures have lasted that long; each attempt's
// context ends with the bound.
func retryDB(ctx context.Context, o Options, what string, fn func(context.Context) error) error {
	r := retrying{o: &o, what: what}
	for {
		actx, cancel := r.bounded(ctx)
		err := fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && !retryable(pe) {
			return fmt.Errorf("sink: %s: %w", what, err)
		}
		if r.n%10 == 0 {
			o.Logger.Warn("postgres unavailable; retrying", "doing", what, "error", o.safeErr(err))
		}
		if err := r.again(ctx, err); err != nil {
			return err
		}
	}
}

// Retryable tells an error of the database worth another try: no answer
// (the server restarting, the network), or a server error that will not
// simply repeat.
func Retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return retryable(pe)
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, ErrSetting)
}

// Connect opens one connection with cfg (PostgresConfig). Its error names
// the host and never the password: pgx's text is scrubbed of it.
func Connect(ctx context.Context, cfg *pgxpool.Config) (*pgx.Conn, error) {
	c, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", cfg.ConnConfig.Host, redact.Error(connectError(err), cfg.ConnConfig.Password))
	}
	return c, nil
}

// connectError is err told by the attempt that matters. pgx joins the
// error of every attempt (under sslmode=prefer, TLS and then plaintext;
// then each host), and the first is rarely it: a server without TLS
// refuses the first attempt before it refuses the password on the second.
// The server's own answer (a wrong password, no such database) is told
// when there is one, else the last attempt's error; errors.Is and
// errors.As still see every attempt.
func connectError(err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return err
	}
	var cause error
	var pe *pgconn.PgError
	switch joined, ok := errors.Unwrap(ce).(interface{ Unwrap() []error }); {
	case errors.As(err, &pe):
		cause = pe
	case ok && len(joined.Unwrap()) > 1:
		all := joined.Unwrap()
		cause = all[len(all)-1]
	default:
		return err
	}
	return &attemptError{text: fmt.Sprintf("failed to connect to `user=%s database=%s`: %v", ce.Config.User, ce.Config.Database, cause), err: err}
}

// attemptError is a connection's error told by one of its attempts.
type attemptError struct {
	text string
	err  error
}

func (e *attemptError) Error() string { return e.text }
func (e *attemptError) Unwrap() error { return e.err }

// Backoff is the wait before attempt (from 0) at something failing:
// doubling from 100 ms, capped, with jitter.
func Backoff(attempt int) time.Duration { return backoff(attempt) }

// retryable tells a server error worth another try (the server going
// down, starting up, or a serialization failure) from one that will only
// repeat (a missing grant, a missing schema).
func retryable(pe *pgconn.PgError) bool {
	switch pe.Code[:2] {
	case "08", "40", "53", "57", "58":
		return true
	}
	return false
}

// safeErr is safeErr's text without the database password, should a
// driver's error ever quote it.
func (o *Options) safeErr(err error) string {
	s := safeErr(err)
	if o.Postgres != nil {
		s = redact.Text(s, o.Postgres.ConnConfig.Password)
	}
	return s
}

// safeErr is err's text with nothing of a row: a server error is given
// by its code and the object it names (DESIGN P6).
func safeErr(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		s := "postgres error " + pe.Code
		if pe.ConstraintName != "" {
			s += " constraint " + pe.ConstraintName
		}
		if pe.TableName != "" {
			s += " table " + pe.TableName
		}
		if pe.Code[:2] != "22" && pe.Code[:2] != "23" {
			s += ": " + pe.Message
		}
		return s
	}
	return err.Error()
}

func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(attempt, 6)
	d = min(d, maxBackoff)
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// WriteText prints r for a person: a line per archive stream.
func (r Result) WriteText(w io.Writer) error {
	for _, st := range r.Streams {
		if _, err := fmt.Fprintf(w, "%s: position %d; wrote %d row(s), %d repeat(s), %d conflict(s), %d reject(s)\n",
			st.Name, st.Position, st.Rows, st.Repeats, st.Conflicts, st.Rejects); err != nil {
			return err
		}
		if st.Recreated != "" {
			if _, err := fmt.Fprintf(w, "%s: created again since the sink read it: read from its start, its rows recorded as %s\n", st.Name, st.Recreated); err != nil {
				return err
			}
		}
	}
	return nil
}
