package service

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/headoffice/fleet"
)

// WatchedKinds are the fleet watch's problems: a store's state or
// condition in the fleet index (fleet.Silent, and the conditions its
// summary reports), each a problem kind of the same name.
var WatchedKinds = []string{fleet.Silent, fleet.CondPaused, fleet.CondQuarantining,
	fleet.CondFileRestored, fleet.CondFileReplaced, fleet.CondLineageHeld}

// DefaultWatchInterval is how often the fleet watch looks at the index.
const DefaultWatchInterval = 10 * time.Second

// FleetWatch turns the fleet index into problems that open once and
// close once (fleet.ProblemBook), with one series of
// rxedge_hq_fleet_problem_open per open problem. Its state is owned by
// the job's goroutine; the book is safe for concurrent readers.
type FleetWatch struct {
	Index    *fleet.Index
	Book     *fleet.ProblemBook
	Interval time.Duration
	Clock    func() time.Time
	open     *prometheus.GaugeVec
	opened   *prometheus.CounterVec
}

// NewFleetWatch returns a watch of ix into book, its metrics on r.
func NewFleetWatch(ix *fleet.Index, book *fleet.ProblemBook, interval time.Duration, r prometheus.Registerer) *FleetWatch {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	w := &FleetWatch{Index: ix, Book: book, Interval: interval, Clock: time.Now,
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rxedge_hq_fleet_problem_open",
			Help: "1 for each open problem of the fleet watch, by kind and store; the series goes when the problem closes."}, []string{"kind", "store"}),
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_hq_fleet_problems_opened_total",
			Help: "Problems the fleet watch opened, by kind."}, []string{"kind"}),
	}
	r.MustRegister(w.open, w.opened)
	// A problem closes once absent for ClearLooks looks: a store whose
	// summary comes and goes (its own credentials write it) keeps one
	// problem open instead of opening and closing, and logging, each time.
	book.SetClearAfter(ClearLooks * interval)
	return w
}

// ClearLooks is how many looks a problem must be absent from to close.
const ClearLooks = 3

// Job runs the index (reading the fleet view through js) and the watch:
// its first pass is the first look once the index holds the fleet view.
func (w *FleetWatch) Job(js jetstream.JetStream, log *slog.Logger) Job {
	return Job{Name: JobFleet, Run: func(ctx context.Context, p *Pass) error {
		g, ctx := errgroup.WithContext(ctx)
		g.Go(func() error { return w.Index.Run(ctx, js) })
		g.Go(func() error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-w.Index.Ready():
			}
			for {
				opened, closed := w.Look()
				for _, pr := range opened {
					log.Info("HQ_PROBLEM_OPENED", "kind", pr.Kind, "store", pr.Store, "detail", pr.Detail)
				}
				for _, pr := range closed {
					log.Info("HQ_PROBLEM_CLOSED", "kind", pr.Kind, "store", pr.Store)
				}
				p.Done(ResultOK)
				if !wait(ctx, w.Interval) {
					return ctx.Err()
				}
			}
		})
		return g.Wait()
	}}
}

// Look opens a problem for each store in a watched state or condition
// that has none open, and closes each open problem whose store is no
// longer in it; it returns what it opened and closed.
func (w *FleetWatch) Look() (opened, closed []fleet.Problem) {
	now := w.Clock()
	for _, kind := range WatchedKinds {
		in := map[string]bool{}
		for off := 0; ; {
			pg := w.Index.Query(fleet.Query{State: kind, Sort: fleet.SortStore, Offset: off, Limit: fleet.MaxPageSize})
			for _, r := range pg.Records {
				in[r.Store] = true
				detail := fleet.ClipDetail(strings.Join(r.Problems, "; "))
				if w.Book.Open(kind, r.Store, detail, now) {
					w.open.WithLabelValues(kind, r.Store).Set(1)
					w.opened.WithLabelValues(kind).Inc()
					opened = append(opened, fleet.Problem{Kind: kind, Store: r.Store, Opened: now, Detail: detail})
				}
			}
			off += len(pg.Records)
			if len(pg.Records) == 0 || off >= pg.Matched {
				break
			}
		}
		for _, pr := range w.Book.List("", true, 0) {
			if pr.Kind == kind && !in[pr.Store] && w.Book.Close(kind, pr.Store, now) {
				w.open.DeleteLabelValues(kind, pr.Store)
				closed = append(closed, pr)
			}
		}
	}
	return opened, closed
}
