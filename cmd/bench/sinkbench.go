package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/testkit/pgtest"
)

// backfillRecords is the size of a chain's archive the backfill figure
// is extrapolated to.
const backfillRecords = 1_600_000_000

// benchSink measures the head-office sink: archive messages of 200 stores
// written into PostgreSQL (ordered consumer, COPY into the staging table,
// INSERT … ON CONFLICT, the position in the same transaction) against a
// raw COPY of the same rows into the same table of a fresh database, in
// the same run on the same server; and extrapolates a backfill of a
// chain's 1.6 billion records from the sink's rate.
func benchSink(ctx context.Context, b *bench) error {
	const sc = "6 sink"
	n := b.size.sinkN
	pg, err := pgtest.New()
	if err != nil {
		why := "PostgreSQL could not be started: " + err.Error()
		if errors.Is(err, pgtest.ErrNoBinaries) {
			why = err.Error()
		}
		b.rep.missing(sc, "sink_vs_raw_copy", "sink rows/s against a raw COPY of the same rows", atLeast(0.5), why)
		b.rep.missing(sc, "sink_backfill_1_6b_hours", "backfill of 1.6 billion records, extrapolated", nil, why)
		return nil
	}
	defer pg.Close()
	dir, err := b.dir("sink")
	if err != nil {
		return err
	}
	// Filling the archive is not measured, and the sink only reads it:
	// no fsync per message, or a full run spends most of its time there.
	h, err := hub.Start(hub.Options{Listen: "127.0.0.1:0", StoreDir: dir, NoSync: true})
	if err != nil {
		return err
	}
	defer h.Shutdown()
	nc, err := nats.Connect(h.URL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		return err
	}
	// The archive as central's sourcing leaves it: one subject per store,
	// the agent's headers, the canonical payload.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: central.ArchiveStreamName,
		Subjects: []string{central.ArchivePrefix + ">"}, Storage: jetstream.FileStorage}); err != nil {
		return err
	}
	const stores = 200
	b.logf("sink: archiving %d movements of %d stores", n, stores)
	var raw [][]any
	now := b.now
	for i := 0; i < n; i++ {
		store := fmt.Sprintf("S%04d", i%stores+1)
		seq := i/stores + 1
		p := generate(store, seq, now)
		m := central.Message{Store: store, Key: p.KeyString(), Digest: hex.EncodeToString(p.Digest[:]), Seq: uint64(seq),
			Schedule: p.Schedule, EnqueuedAt: now, Payload: p.Payload}
		msg := m.Msg()
		msg.Subject = central.ArchiveSubject(store)
		msg.Header.Del(central.HeaderExpectLast)
		if _, err := js.PublishMsgAsync(msg); err != nil {
			return err
		}
		if i%4096 == 4095 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				return errors.New("sink: archiving timed out")
			}
		}
		row, err := rawRow(m, uint64(i+1), now)
		if err != nil {
			return err
		}
		raw = append(raw, row)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return errors.New("sink: archiving timed out")
	}

	// The sink and its baseline write the same table of one database,
	// emptied and checkpointed before each measurement, taking turns
	// (raw, sink, raw, sink, …): the figures are the medians of the
	// rounds, so a burst of other work on the machine moves one round,
	// not the ratio. The baseline has the sink's shape: a COPY of the
	// same rows into movements in transactions of the sink's batch size,
	// each committed as the sink's are (synchronous_commit as the server
	// has it, on), only without the archive read, the position, and the
	// savepoint that lets a batch holding a known key fall back to the
	// staging table.
	batch := benchBatch()
	rounds := 5 // a quick run's rounds last seconds each: more of them
	if !b.size.quick {
		rounds = 2
	}
	dbName, err := benchDB(ctx, pg, "bench_sink")
	if err != nil {
		return err
	}
	url := pg.SuperURL(dbName)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	var rawRates, sinkRates, ratios []float64
	for r := 1; r <= rounds; r++ {
		if err := emptySink(ctx, url); err != nil {
			return err
		}
		t0 := time.Now()
		if err := rawCopy(ctx, url, raw, batch); err != nil {
			return err
		}
		rawRate := float64(n) / time.Since(t0).Seconds()
		if err := emptySink(ctx, url); err != nil {
			return err
		}
		t0 = time.Now()
		res, err := sink.Run(ctx, sink.Options{Conn: nc, Postgres: cfg, UntilCaughtUp: true, Batch: batch})
		sinkSecs := time.Since(t0).Seconds()
		if err != nil {
			return err
		}
		if got := res.Streams[0].Rows; got != uint64(n) {
			return fmt.Errorf("sink wrote %d rows of %d", got, n)
		}
		sinkRate := float64(n) / sinkSecs
		b.logf("sink: round %d of %d: raw COPY %.0f rows/s, sink %.0f rows/s (%.2f×)", r, rounds, rawRate, sinkRate, sinkRate/rawRate)
		rawRates, sinkRates, ratios = append(rawRates, rawRate), append(sinkRates, sinkRate), append(ratios, sinkRate/rawRate)
	}
	raw = nil
	rawRate, sinkRate := medianOf(rawRates), medianOf(sinkRates)
	var each []string
	for _, v := range ratios {
		each = append(each, fmt.Sprintf("%.2f", v))
	}

	b.rep.ratio(sc, "sink_vs_raw_copy", fmt.Sprintf("sink rows/s (%d movements, %d stores, batches of %d) against a raw COPY of the same rows into the same table in transactions of the same size; medians of %d alternating rounds",
		n, stores, batch, rounds), sinkRate/rawRate, fmt.Sprintf("raw COPY %.0f rows/s; rounds %s", rawRate, strings.Join(each, ", ")), atLeast(0.5))
	b.rep.value(sc, "sink_rows_per_s", "sink rows/s, archive read to commit (median of the rounds)", sinkRate, "/s", nil)
	hours := backfillRecords / sinkRate / 3600
	b.rep.value(sc, "sink_backfill_1_6b_hours", fmt.Sprintf("backfill of 1.6 billion records at the sink's rate, extrapolated linearly (%s; PostgreSQL on the same machine)", environment()), hours, "h", nil)
	if b.size.quick {
		b.rep.note(fmt.Sprintf("sink: a quick run measures %d movements; the backfill figure extrapolates from that size, where indexes still fit in memory", n))
	}
	return nil
}

// emptySink empties the sink's tables and positions, and checkpoints, so
// that a measurement starts from an empty table and pays for no earlier
// one's dirty pages.
func emptySink(ctx context.Context, url string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `TRUNCATE movements, movement_repeats, movement_conflicts, sink_rejects, sink_positions`); err != nil {
		return fmt.Errorf("empty the sink's tables: %w", err)
	}
	if _, err := c.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// rawCopy copies rows into movements, batch rows a transaction.
func rawCopy(ctx context.Context, url string, rows [][]any, batch int) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	for len(rows) > 0 {
		k := min(batch, len(rows))
		err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			n, err := tx.CopyFrom(ctx, pgx.Identifier{"movements"}, rawColumns, pgx.CopyFromRows(rows[:k]))
			if err == nil && n != int64(k) {
				err = fmt.Errorf("%d rows of %d", n, k)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("raw copy: %w", err)
		}
		rows = rows[k:]
	}
	return nil
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchDB creates a database with the sink's schema.
func benchDB(ctx context.Context, pg *pgtest.Server, name string) (string, error) {
	c, err := pgx.Connect(ctx, pg.SuperURL("postgres"))
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	d, err := pgx.Connect(ctx, pg.SuperURL(name))
	if err != nil {
		return "", err
	}
	defer d.Close(ctx)
	_, err = sink.Migrate(ctx, d)
	return name, err
}

var rawColumns = []string{"store_id", "key", "seq", "digest", "movement_id", "type",
	"ndc", "quantity", "unit", "occurred_at", "schedule", "lot", "expires", "rx_ref", "dea_form_222", "note", "payload",
	"archive_stream", "archive_seq", "enqueued_at", "archived_at"}

func rawRow(m central.Message, archiveSeq uint64, now time.Time) ([]any, error) {
	var mv movement.Movement
	if err := json.Unmarshal(m.Payload, &mv); err != nil {
		return nil, err
	}
	var q pgtype.Numeric
	if err := q.Scan(mv.Quantity); err != nil {
		return nil, err
	}
	at, err := time.Parse(time.RFC3339Nano, mv.OccurredAt)
	if err != nil {
		return nil, err
	}
	null := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	return []any{m.Store, m.Key, int64(m.Seq), m.Digest, mv.MovementID, mv.Type,
		mv.NDC, q, mv.Unit, at, null(mv.Schedule), null(mv.Lot), null(mv.Expires), null(mv.RxRef), null(mv.DEAForm222), null(mv.Note), string(m.Payload),
		central.ArchiveStreamName, int64(archiveSeq), now, now}, nil
}

func benchBatch() int {
	if v, err := strconv.Atoi(os.Getenv("RXBENCH_SINK_BATCH")); err == nil && v > 0 {
		return v
	}
	return sink.DefaultBatch
}
