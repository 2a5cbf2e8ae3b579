package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/headoffice/reconcile"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/internal/holdpoint"
)

// Names of the jobs.
const (
	JobSink      = "sink"
	JobWitness   = "witness"
	JobVerify    = "verify"
	JobReconcile = "reconcile"
	JobFleet     = "fleet"
	JobConsole   = "console"
)

// VerifyStateName is the row of verify_state the service's verification
// keeps.
const VerifyStateName = "service"

// inFlightBound bounds how long a pass's last transaction may take to
// commit once the service is asked to stop.
const inFlightBound = 15 * time.Second

// Env is what the jobs share: the connections hq run made, the roster
// and the keys. Audit reads the archives (the production
// configuration's audit user), Witness publishes countersignatures (its
// witness user), Ops reads the fleet view (an operator).
type Env struct {
	Pool     *pgxpool.Pool
	Postgres *pgxpool.Config

	Audit         *nats.Conn
	AuditPrefix   string
	Witness       *nats.Conn
	WitnessPrefix string
	Ops           *nats.Conn
	Archives      []string

	Roster *provision.Roster
	// Asker asks the stores for their checkpoints and gaps, signed with
	// the operator key; nil asks nobody.
	Asker *fleet.Client
	// WitnessKey checks the witness's countersignatures; nil: none.
	WitnessKey note.Verifier

	Logger   *slog.Logger
	Registry prometheus.Registerer
}

// swapGatherer gathers from the registry of a job's latest run: a job
// whose metrics are made anew at each run (the witness's) serves the
// current ones.
type swapGatherer struct {
	p atomic.Pointer[prometheus.Registry]
}

func (g *swapGatherer) Gather() ([]*dto.MetricFamily, error) {
	if r := g.p.Load(); r != nil {
		return r.Gather()
	}
	return nil, nil
}

// wait waits d or until ctx ends; it reports whether d passed.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// SinkJob follows the archives into PostgreSQL: it catches up (its first
// pass), then follows them. The sink's own metrics (rxedge_sink_*) are
// m's.
func SinkJob(e *Env, m *sink.Metrics, batch int, flush time.Duration) Job {
	o := sink.Options{Conn: e.Audit, APIPrefix: e.AuditPrefix, Archives: e.Archives, Postgres: e.Postgres,
		Batch: batch, FlushInterval: flush, Logger: e.Logger.With("job", JobSink), Metrics: m}
	return Job{Name: JobSink, Lease: true, Run: func(ctx context.Context, p *Pass) error {
		// The schema is brought up to date first, as hq sink does; on a
		// current schema this needs no grant beyond the sink's.
		conn, err := sink.Connect(ctx, e.Postgres)
		if err != nil {
			return err
		}
		_, err = sink.Migrate(ctx, conn)
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		caught := o
		caught.UntilCaughtUp = true
		if _, err := sink.Run(ctx, caught); err != nil {
			return err
		}
		p.Done(ResultOK)
		_, err = sink.Run(ctx, o)
		return err
	}}
}

// WitnessJob countersigns the stores' checkpoints every interval, its
// state in stateFile (the witness's signed state, on the service's host).
func WitnessJob(e *Env, signer note.Signer, stateFile string, interval time.Duration, g *swapGatherer) Job {
	log := e.Logger.With("job", JobWitness)
	return Job{Name: JobWitness, Lease: true, Run: func(ctx context.Context, p *Pass) error {
		reg := prometheus.NewRegistry()
		w, err := audit.NewWitness(ctx, audit.WitnessOptions{Conn: e.Witness, APIPrefix: e.WitnessPrefix, Archives: e.Archives,
			Roster: e.Roster, Signer: signer, StateFile: stateFile, Log: log, Registerer: reg})
		if err != nil {
			return err
		}
		g.p.Store(reg)
		for {
			run, err := w.Once(ctx)
			if err != nil {
				return err
			}
			res := ResultOK
			if len(run.Refused) > 0 {
				res = ResultAttention
			}
			if run.Countersigned > 0 || len(run.Refused) > 0 {
				log.Info("HQ_WITNESS_PASS", "read", run.Read, "countersigned", run.Countersigned, "skipped", run.Skipped, "refused", len(run.Refused))
			}
			p.Done(res)
			if !wait(ctx, interval) {
				return ctx.Err()
			}
		}
	}}
}

// verifyMetrics are the verification job's own metrics.
type verifyMetrics struct {
	records, rechecked *prometheus.CounterVec
	lastRecords        prometheus.Gauge
	incremental        prometheus.Gauge
	open               *prometheus.GaugeVec
}

func newVerifyMetrics(r prometheus.Registerer) *verifyMetrics {
	m := &verifyMetrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_hq_verify_records_total",
			Help: "Archive records verification read for the first time, by kind (movement, checkpoint, other)."}, []string{"kind"}),
		rechecked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_hq_verify_reread_records_total",
			Help: "Archive records verification read again: the rolling re-check (recheck), or to rebuild a store or name what changed (reread)."}, []string{"why"}),
		lastRecords: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rxedge_hq_verify_last_pass_records",
			Help: "Archive records the last verification pass read for the first time."}),
		incremental: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rxedge_hq_verify_last_pass_incremental",
			Help: "1 when the last verification pass started from its saved state, 0 when it verified the archives from the start."}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rxedge_hq_verify_findings_open",
			Help: "Open findings of verification (table verify_findings), by store and kind."}, []string{"store", "kind"}),
	}
	r.MustRegister(m.records, m.rechecked, m.lastRecords, m.incremental, m.open)
	return m
}

// VerifyJob verifies the stores' logs incrementally every interval, its
// state in verify_state and its findings in verify_findings, both
// written in one transaction after each pass.
func VerifyJob(e *Env, interval time.Duration, recheck int64) Job {
	m := newVerifyMetrics(e.Registry)
	log := e.Logger.With("job", JobVerify)
	return Job{Name: JobVerify, Lease: true, Run: func(ctx context.Context, p *Pass) error {
		if err := openFindings(ctx, e.Pool, m.open); err != nil {
			return fmt.Errorf("service: read the open findings: %w", err)
		}
		for {
			st := &heldState{PGState: PGState{Pool: e.Pool, Name: VerifyStateName}}
			o := audit.Options{Conn: e.Audit, APIPrefix: e.AuditPrefix, Archives: e.Archives, Roster: e.Roster,
				Witness: e.WitnessKey, State: st, RecheckBudget: recheck, Progress: verifyProgress}
			if e.Asker != nil {
				o.Asker = e.Asker
			}
			rep, err := audit.Verify(ctx, o)
			if err != nil {
				return err
			}
			// The pass is done: its record is committed even when the
			// service is asked to stop meanwhile.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inFlightBound)
			opened, closed, err := recordPass(cctx, e.Pool, p.Fence, VerifyStateName, st.saved, rep, time.Now().UTC())
			if err == nil {
				err = openFindings(cctx, e.Pool, m.open)
			}
			cancel()
			if err != nil {
				return err
			}
			m.records.WithLabelValues("movement").Add(float64(rep.Movements))
			m.records.WithLabelValues("checkpoint").Add(float64(rep.Checkpoints))
			m.records.WithLabelValues("other").Add(float64(rep.Records - min(rep.Records, rep.Movements+rep.Checkpoints)))
			m.rechecked.WithLabelValues("recheck").Add(float64(rep.Rechecked))
			m.rechecked.WithLabelValues("reread").Add(float64(rep.Reread))
			m.lastRecords.Set(float64(rep.Records))
			m.incremental.Set(b2f(rep.Incremental))
			log.Info("HQ_VERIFY_PASS", "records", rep.Records, "rechecked", rep.Rechecked, "incremental", rep.Incremental,
				"findings_opened", opened, "findings_closed", closed, "ok", rep.OK())
			res := ResultOK
			if !rep.OK() {
				res = ResultAttention
			}
			p.Done(res)
			if !wait(ctx, interval) {
				return ctx.Err()
			}
		}
	}}
}

// verifyProgress is told of a pass's reads: the crash test's point
// inside one, once it read archive records.
func verifyProgress(read string, done, _ uint64) {
	if read == audit.ReadArchive && done > 0 {
		holdpoint.Reach(holdpoint.VerifyRead)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ReconcileJob reconciles the archive with what the stores acknowledged
// every interval (asking the stores with gaps, when Env.Asker is set).
func ReconcileJob(e *Env, interval, grace time.Duration) Job {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rxedge_hq_reconcile_stores",
		Help: "Stores of the last reconciliation, by result: ok, or attention (something unexplained, a conflict, a reused sequence, a malformed record or movements lost with a replaced file)."}, []string{"result"})
	unexplained := prometheus.NewGauge(prometheus.GaugeOpts{Name: "rxedge_hq_reconcile_unexplained_sequences",
		Help: "Missing sequences the last reconciliation could not explain, over every store."})
	e.Registry.MustRegister(g, unexplained)
	log := e.Logger.With("job", JobReconcile)
	return Job{Name: JobReconcile, Lease: true, Run: func(ctx context.Context, p *Pass) error {
		for {
			o := reconcile.Options{Conn: e.Audit, APIPrefix: e.AuditPrefix, Archives: e.Archives, Grace: grace}
			if e.Asker != nil {
				o.Asker = e.Asker
			}
			rep, err := reconcile.Run(ctx, o)
			if err != nil {
				return err
			}
			holdpoint.Reach(holdpoint.ReconcilePass)
			var ok, attention float64
			var unx uint64
			for i := range rep.Stores {
				if rep.Stores[i].OK() {
					ok++
				} else {
					attention++
				}
				unx += rep.Stores[i].UnexplainedCount()
			}
			g.WithLabelValues("ok").Set(ok)
			g.WithLabelValues("attention").Set(attention)
			unexplained.Set(float64(unx))
			log.Info("HQ_RECONCILE_PASS", "records", rep.Records, "stores", len(rep.Stores), "attention", attention, "unexplained", unx)
			res := ResultOK
			if !rep.OK() {
				res = ResultAttention
			}
			p.Done(res)
			if !wait(ctx, interval) {
				return ctx.Err()
			}
		}
	}}
}
