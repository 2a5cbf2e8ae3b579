package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	stdsync "sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rxedge/agent/retry"
)

// States of a job, as rxedge_hq_job_state and /readyz show them.
const (
	StateStarting = "starting" // in its first pass since the service started
	StateStandby  = "standby"  // waiting for its lease, which another service holds
	StateRunning  = "running"  // has completed a pass, and runs
	StateRetrying = "retrying" // failed: waiting to start again
	StateStopped  = "stopped"
)

var states = []string{StateStarting, StateStandby, StateRunning, StateRetrying, StateStopped}

// Results of a job's run, the label result of rxedge_hq_job_runs_total.
const (
	ResultOK        = "ok"        // a pass that held
	ResultAttention = "attention" // a pass that completed with something to look at (a finding)
	ResultError     = "error"     // a run that failed: it is started again after a backoff
)

// Job is one of the service's jobs.
type Job struct {
	Name string
	// Lease says the job writes what a second service must not write at
	// the same time: it runs only while it holds its lease.
	Lease bool
	// Run runs the job until ctx ends (ctx also ends when the lease is
	// lost), calling p.Done after each pass it completes. An error ends
	// the run: the supervisor reports it and starts the job again after
	// a backoff. A nil error before ctx ends counts as a failure too.
	Run func(ctx context.Context, p *Pass) error
}

// Pass is how a job reports the passes it completes.
type Pass struct {
	s     *Supervisor
	st    *jobState
	lease *Lease
}

// Fence checks inside tx that the job still holds its lease
// (Lease.Fence); it passes when the job runs without one.
func (p *Pass) Fence(ctx context.Context, tx pgx.Tx) error {
	if p == nil || p.lease == nil {
		return nil
	}
	return p.lease.Fence(ctx, tx)
}

// Done records a completed pass: result is ResultOK or ResultAttention.
func (p *Pass) Done(result string) {
	p.s.m.runs.WithLabelValues(p.st.job.Name, result).Inc()
	p.s.m.success.WithLabelValues(p.st.job.Name).Set(float64(p.s.o.Clock().UnixNano()) / 1e9)
	p.st.mu.Lock()
	p.st.passed = true
	p.st.passes++
	p.st.mu.Unlock()
	p.s.setState(p.st, StateRunning)
}

// Restart is the supervisor's default backoff between a job's failed run
// and the next: full jitter, from a second up to a minute.
var Restart = retry.Policy{BaseDelay: time.Second, MaxDelay: time.Minute}

// DefaultStopTimeout bounds how long Run waits for the jobs once ctx ends.
const DefaultStopTimeout = 30 * time.Second

// Options configure a Supervisor.
type Options struct {
	Jobs []Job
	// Leaser gives the jobs with Lease their leases; nil runs them
	// without (a service alone on its database, the dev mode).
	Leaser *Leaser
	// Policy paces a failing job's restarts (default Restart).
	Policy retry.Policy
	// StopTimeout bounds the wait for the jobs once ctx ends (default
	// DefaultStopTimeout).
	StopTimeout time.Duration
	Logger      *slog.Logger
	Clock       func() time.Time
}

// Supervisor runs the jobs: each in a goroutine of its own, restarted
// after a failure, until ctx ends. It owns every job's goroutine; a
// job's state is behind the job's mutex.
type Supervisor struct {
	o    Options
	jobs []*jobState
	reg  *prometheus.Registry
	m    jobMetrics
}

type jobState struct {
	job Job
	mu  stdsync.Mutex
	// state is the job's state; passed says a pass completed since the
	// service started; lastErr is the last failure's text.
	state   string
	passed  bool
	passes  uint64
	lastErr string
}

type jobMetrics struct {
	runs    *prometheus.CounterVec
	success *prometheus.GaugeVec
	state   *prometheus.GaugeVec
	lease   *prometheus.GaugeVec
}

// New returns a supervisor of o.Jobs; its metrics are on Registry.
func New(o Options) *Supervisor {
	o.Policy = o.Policy.Or(Restart)
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	s := &Supervisor{o: o, reg: prometheus.NewRegistry()}
	s.m = jobMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_hq_job_runs_total",
			Help: "Passes each job completed (result ok or attention) and runs that failed (error), by job."}, []string{"job", "result"}),
		success: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rxedge_hq_job_last_success_timestamp_seconds",
			Help: "When each job last completed a pass (Unix time)."}, []string{"job"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rxedge_hq_job_state",
			Help: "Each job's state: 1 for the state it is in (starting, standby, running, retrying, stopped), 0 for the others."}, []string{"job", "state"}),
		lease: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rxedge_hq_job_lease_held",
			Help: "1 while this service holds the job's lease (a PostgreSQL advisory lock), 0 while it waits for it or runs without."}, []string{"job"}),
	}
	s.reg.MustRegister(s.m.runs, s.m.success, s.m.state, s.m.lease)
	for _, j := range o.Jobs {
		st := &jobState{job: j}
		s.jobs = append(s.jobs, st)
		for _, r := range []string{ResultOK, ResultAttention, ResultError} {
			s.m.runs.WithLabelValues(j.Name, r)
		}
		s.m.lease.WithLabelValues(j.Name).Set(0)
		s.setState(st, StateStarting)
	}
	return s
}

// Registry holds the supervisor's metrics; the jobs register theirs on
// it too.
func (s *Supervisor) Registry() *prometheus.Registry { return s.reg }

func (s *Supervisor) setState(st *jobState, state string) {
	st.mu.Lock()
	st.state = state
	st.mu.Unlock()
	for _, x := range states {
		v := 0.0
		if x == state {
			v = 1
		}
		s.m.state.WithLabelValues(st.job.Name, x).Set(v)
	}
}

// Run runs every job until ctx ends, then waits for them at most
// StopTimeout: its error names the jobs that did not end in time.
func (s *Supervisor) Run(ctx context.Context) error {
	var wg stdsync.WaitGroup
	for _, st := range s.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.runJob(ctx, st)
		}()
	}
	<-ctx.Done()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(s.o.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		var left []string
		for _, j := range s.Status() {
			if j.State != StateStopped {
				left = append(left, j.Job)
			}
		}
		return fmt.Errorf("service: jobs still running %s after the stop was asked: %s", s.o.StopTimeout, strings.Join(left, ", "))
	}
}

// runJob runs one job, again after each failure, until ctx ends.
func (s *Supervisor) runJob(ctx context.Context, st *jobState) {
	defer s.setState(st, StateStopped)
	for attempt := 0; ctx.Err() == nil; {
		st.mu.Lock()
		before := st.passes
		st.mu.Unlock()
		err := s.once(ctx, st)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("ended by itself")
		}
		st.mu.Lock()
		if st.passes > before {
			attempt = 0 // it worked for a while: start the backoff again
		}
		st.lastErr = err.Error()
		st.mu.Unlock()
		s.m.runs.WithLabelValues(st.job.Name, ResultError).Inc()
		s.setState(st, StateRetrying)
		d := s.o.Policy.Delay(attempt, rand.Float64())
		s.o.Logger.Warn("HQ_JOB_FAILED", "job", st.job.Name, "error", err.Error(), "retry_in", d.Round(time.Millisecond).String())
		attempt++
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// once is one run of a job: its lease taken first, when it needs one.
func (s *Supervisor) once(ctx context.Context, st *jobState) error {
	name := st.job.Name
	st.mu.Lock()
	passed := st.passed
	st.mu.Unlock()
	resume := StateStarting
	if passed {
		resume = StateRunning
	}
	if st.job.Lease && s.o.Leaser != nil {
		l, err := s.o.Leaser.Acquire(ctx, name, func() {
			s.setState(st, StateStandby)
			s.o.Logger.Info("HQ_JOB_STANDBY", "job", name, "why", "another service holds its lease")
		})
		if err != nil {
			return err
		}
		defer l.Release()
		s.m.lease.WithLabelValues(name).Set(1)
		defer s.m.lease.WithLabelValues(name).Set(0)
		s.setState(st, resume)
		s.o.Logger.Info("HQ_JOB_LEASED", "job", name)
		err = st.job.Run(l.Context(), &Pass{s: s, st: st, lease: l})
		if ctx.Err() == nil && l.Lost() {
			return fmt.Errorf("its lease was lost (the connection holding it failed): %w", errors.Join(err, ErrLeaseLost))
		}
		return err
	}
	s.setState(st, resume)
	return st.job.Run(ctx, &Pass{s: s, st: st})
}

// JobStatus is one job's standing, as /readyz shows it.
type JobStatus struct {
	Job       string `json:"job"`
	State     string `json:"state"`
	Passed    bool   `json:"passed"`
	LastError string `json:"last_error,omitempty"`
}

// Status is every job's standing, in the jobs' order.
func (s *Supervisor) Status() []JobStatus {
	out := make([]JobStatus, 0, len(s.jobs))
	for _, st := range s.jobs {
		st.mu.Lock()
		out = append(out, JobStatus{Job: st.job.Name, State: st.state, Passed: st.passed, LastError: st.lastErr})
		st.mu.Unlock()
	}
	return out
}

// Ready says whether every job has completed a first pass, is retrying
// after a failure, or waits as a standby for its lease.
func (s *Supervisor) Ready() bool {
	for _, j := range s.Status() {
		if !j.Passed && j.State != StateRetrying && j.State != StateStandby {
			return false
		}
	}
	return true
}

// Handler serves /metrics (the supervisor's registry and more, such as
// the sink's), /readyz (see the package doc; its body lists each job's
// state) and /healthz.
func (s *Supervisor) Handler(more ...prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	g := append(prometheus.Gatherers{s.reg}, more...)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		var b strings.Builder
		for _, j := range s.Status() {
			fmt.Fprintf(&b, "%s: %s", j.Job, j.State)
			if !j.Passed && j.State == StateStarting {
				b.WriteString(" (first pass not completed)")
			}
			if j.State == StateRetrying && j.LastError != "" {
				fmt.Fprintf(&b, " (last error: %s)", j.LastError)
			}
			b.WriteString("\n")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !s.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		w.Write([]byte(b.String()))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	return mux
}

// jobNames are the names of the jobs, sorted: for messages.
func jobNames(jobs []Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.Name
	}
	slices.Sort(out)
	return out
}
