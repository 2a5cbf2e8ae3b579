// Package metrics exposes the agent's Prometheus metrics (GET /metrics).
// Labels carry states, classes, outcome kinds and paths only — never keys,
// movement ids or payload data (DESIGN P6). Every method is safe on a nil
// *Metrics, so components can run without metrics in tests.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
)

// Metrics holds the agent's collectors.
type Metrics struct {
	reg *prometheus.Registry

	ingestDuration  prometheus.Histogram
	ingestMovements *prometheus.CounterVec
	outcomes        *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	publishDuration *prometheus.HistogramVec
	connState       *prometheus.GaugeVec
	centralProblem  *prometheus.GaugeVec
	centralErrors   *prometheus.CounterVec
}

// ConnStates are the values of the connection state gauge.
var ConnStates = []string{"online", "offline", "paused", "idle"}

// New creates the collectors and registers a collector that reads the
// queue's counters at scrape time (no scan: see queue.Stats).
func New(q *queue.Queue) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		ingestDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rxedge_ingest_duration_seconds",
			Help:    "Time from receiving a submission to acknowledging it (after its fsync).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		ingestMovements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rxedge_ingest_movements_total",
			Help: "Movements submitted, by result.",
		}, []string{"result"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rxedge_sync_outcomes_total",
			Help: "Delivery attempt outcomes, by kind.",
		}, []string{"outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rxedge_sync_attempts_total",
			Help: "Publish attempts, by path (single or batch).",
		}, []string{"path"}),
		publishDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rxedge_publish_duration_seconds",
			Help:    "Time from publishing to central's acknowledgement, by path.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"path"}),
		connState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rxedge_connection_state",
			Help: "1 for the sender's current connection state, 0 for the others.",
		}, []string{"state"}),
		centralProblem: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rxedge_central_problem",
			Help: "1 for the reason the agent cannot reach or use central, 0 for the others (all 0 when it can).",
		}, []string{"reason"}),
		centralErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rxedge_central_errors_total",
			Help: "Errors seen reaching or using central (failed connection attempts, refusals, pauses), by reason.",
		}, []string{"reason"}),
	}
	m.reg.MustRegister(m.ingestDuration, m.ingestMovements, m.outcomes, m.attempts, m.publishDuration, m.connState,
		m.centralProblem, m.centralErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if q != nil {
		m.reg.MustRegister(&queueCollector{q: q})
	}
	m.SetConnState("idle")
	m.SetCentralProblem("")
	for _, r := range status.ConnReasons {
		m.centralErrors.WithLabelValues(r)
	}
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Ingest records one acknowledged (or refused) submission.
func (m *Metrics) Ingest(d time.Duration, accepted, duplicates, rejected int) {
	if m == nil {
		return
	}
	m.ingestDuration.Observe(d.Seconds())
	m.ingestMovements.WithLabelValues("accepted").Add(float64(accepted))
	m.ingestMovements.WithLabelValues("duplicate").Add(float64(duplicates))
	m.ingestMovements.WithLabelValues("rejected").Add(float64(rejected))
}

// Outcome counts n delivery outcomes of a kind.
func (m *Metrics) Outcome(kind string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.outcomes.WithLabelValues(kind).Add(float64(n))
}

// Publish records n publish attempts on a path and the time to their ack.
func (m *Metrics) Publish(path string, n int, d time.Duration) {
	if m == nil {
		return
	}
	m.attempts.WithLabelValues(path).Add(float64(n))
	if d > 0 {
		m.publishDuration.WithLabelValues(path).Observe(d.Seconds())
	}
}

// SetConnState sets the connection state gauge.
func (m *Metrics) SetConnState(state string) {
	if m == nil {
		return
	}
	for _, s := range ConnStates {
		v := 0.0
		if s == state {
			v = 1
		}
		m.connState.WithLabelValues(s).Set(v)
	}
}

// SetCentralProblem sets the central problem gauge: 1 for reason (one of
// status.ConnReasons), 0 for the others; "" sets them all to 0.
func (m *Metrics) SetCentralProblem(reason string) {
	if m == nil {
		return
	}
	for _, r := range status.ConnReasons {
		v := 0.0
		if r == reason {
			v = 1
		}
		m.centralProblem.WithLabelValues(r).Set(v)
	}
}

// CentralError counts one error seen reaching or using central.
func (m *Metrics) CentralError(reason string) {
	if m == nil {
		return
	}
	m.centralErrors.WithLabelValues(reason).Inc()
}

// queueCollector reads the queue's counters at scrape time.
type queueCollector struct{ q *queue.Queue }

var (
	movementsDesc = prometheus.NewDesc("rxedge_movements", "Movements held, by state and class.", []string{"state", "class"}, nil)
	oldestDesc    = prometheus.NewDesc("rxedge_oldest_pending_age_seconds", "Age of the oldest pending movement (0 when none).", nil, nil)
	syncedDesc    = prometheus.NewDesc("rxedge_synced_total", "Movements ever synced to central.", nil, nil)
	fileDesc      = prometheus.NewDesc("rxedge_data_file_bytes", "Size of the data file.", nil, nil)
)

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- movementsDesc
	ch <- oldestDesc
	ch <- syncedDesc
	ch <- fileDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.q.Stats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(movementsDesc, err)
		return
	}
	for _, st := range queue.States {
		for _, cl := range movement.Classes {
			ch <- prometheus.MustNewConstMetric(movementsDesc, prometheus.GaugeValue, float64(s.Counts[st][cl]), st.String(), cl.String())
		}
	}
	age := 0.0
	if !s.OldestPending.IsZero() {
		age = time.Since(s.OldestPending).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(syncedDesc, prometheus.CounterValue, float64(s.SyncedTotal))
	ch <- prometheus.MustNewConstMetric(fileDesc, prometheus.GaugeValue, float64(s.FileSize))
}
