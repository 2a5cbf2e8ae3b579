// Package metrics exposes the agent's Prometheus metrics (GET /metrics).
// Labels carry states, classes, outcome kinds, causes, reasons and paths
// only, each from a bounded set — never keys, movement ids or payload data
// (DESIGN P6). Every series of a bounded label set exists from the start,
// at 0, so alert rules see it before the first occurrence. Every method is
// safe on a nil *Metrics, so components can run without metrics in tests.
package metrics

import (
	"net/http"
	"time"

	"github.com/rxedge/agent/internal/disk"
	"github.com/rxedge/agent/internal/version"
	"github.com/rxedge/agent/status"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

// Metrics holds the agent's collectors.
type Metrics struct {
	reg *prometheus.Registry

	ingestDuration  prometheus.Histogram
	ingestMovements *prometheus.CounterVec
	// ingestResults are ingestMovements' accepted, duplicate and rejected
	// series, looked up once rather than on every submission.
	ingestResults   [3]prometheus.Counter
	outcomes        *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	publishDuration *prometheus.HistogramVec
	connState       *prometheus.GaugeVec
	refusedTokens   *prometheus.CounterVec
	refusedRequests *prometheus.CounterVec
	centralErrors   *prometheus.CounterVec
}

// OutcomeKinds are the delivery outcome kinds the sender reports (see
// sync's classification); each series exists from the start.
var OutcomeKinds = []string{
	"stored", "already_stored", "offline", "local:backpressure",
	"transient:timeout", "transient:error", "transient:api_error", "transient:in_process", "transient:not_readable",
	"transient:verify", "transient:duplicate_ack", "transient:no_responders", "transient:batch_incomplete", "transient:batch_not_enabled",
	"permanent:too_large", "permanent:conflict",
	"systemic:permission", "systemic:stream_full", "systemic:stream_missing", "systemic:insufficient_resources",
	"systemic:jetstream_disabled", "systemic:unavailable", "systemic:unresponsive",
}

// Listeners that refuse a token.
const (
	ListenerIngest  = "ingest"
	ListenerMetrics = "metrics"
)

// Token refusal causes.
const (
	TokenMissing = "missing"
	TokenWrong   = "wrong"
)

// RefusalCauses are the causes of a refused ingest request, by its
// status code (see RefusalCause).
var RefusalCauses = []string{"invalid", "conflict", "too_large", "unavailable", "disk_full", "internal"}

// RefusalCause is the bounded cause of a refused request with HTTP status
// code.
func RefusalCause(code int) string {
	switch code {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType:
		return "invalid"
	case http.StatusConflict:
		return "conflict"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusInsufficientStorage:
		return "disk_full"
	}
	return "internal"
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
		refusedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rxedge_refused_tokens_total",
			Help: "Requests refused for a missing or wrong bearer token, by listener and cause.",
		}, []string{"listener", "cause"}),
		refusedRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rxedge_ingest_refused_requests_total",
			Help: "Submissions refused as a whole (nothing stored), by cause.",
		}, []string{"cause"}),
		centralErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rxedge_central_errors_total",
			Help: "Errors seen reaching or using central (failed connection attempts, refusals, pauses), by reason.",
		}, []string{"reason"}),
	}
	info := version.Get()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "rxedge_build_info",
		Help:        "Always 1; the labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": info.Version, "commit": info.Commit, "go": info.GoVersion},
	})
	buildInfo.Set(1)
	m.reg.MustRegister(m.ingestDuration, m.ingestMovements, m.outcomes, m.attempts, m.publishDuration, m.connState,
		m.refusedTokens, m.refusedRequests, m.centralErrors, buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if q != nil {
		m.reg.MustRegister(&queueCollector{q: q})
	}
	for i, r := range []string{"accepted", "duplicate", "rejected"} {
		m.ingestResults[i] = m.ingestMovements.WithLabelValues(r)
	}
	for _, k := range OutcomeKinds {
		m.outcomes.WithLabelValues(k)
	}
	for _, p := range []string{"single", "batch"} {
		m.attempts.WithLabelValues(p)
		m.publishDuration.WithLabelValues(p)
	}
	for _, l := range []string{ListenerIngest, ListenerMetrics} {
		for _, c := range []string{TokenMissing, TokenWrong} {
			m.refusedTokens.WithLabelValues(l, c)
		}
	}
	for _, c := range RefusalCauses {
		m.refusedRequests.WithLabelValues(c)
	}
	for _, r := range status.ConnReasons {
		m.centralErrors.WithLabelValues(r)
	}
	m.SetConnState("idle")
	return m
}

// WatchConnection exports the sender's last successful sync and the
// reason central cannot be used, read from conn at scrape time.
func (m *Metrics) WatchConnection(conn func() status.Connection) {
	if m == nil {
		return
	}
	m.reg.MustRegister(&connCollector{conn: conn})
}

// CentralError counts one error seen reaching or using central, by its
// reason (one of status.ConnReasons).
func (m *Metrics) CentralError(reason string) {
	if m == nil {
		return
	}
	m.centralErrors.WithLabelValues(reason).Inc()
}

// RefusedToken counts a request refused by listener for a token cause.
func (m *Metrics) RefusedToken(listener, cause string) {
	if m == nil {
		return
	}
	m.refusedTokens.WithLabelValues(listener, cause).Inc()
}

// RefusedRequest counts a submission refused as a whole with HTTP status
// code.
func (m *Metrics) RefusedRequest(code int) {
	if m == nil {
		return
	}
	m.refusedRequests.WithLabelValues(RefusalCause(code)).Inc()
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
	for i, n := range [...]int{accepted, duplicates, rejected} {
		if n != 0 {
			m.ingestResults[i].Add(float64(n))
		}
	}
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

// queueCollector reads the queue's counters at scrape time.
type queueCollector struct{ q *queue.Queue }

var (
	movementsDesc = prometheus.NewDesc("rxedge_movements", "Movements held, by state and class.", []string{"state", "class"}, nil)
	oldestDesc    = prometheus.NewDesc("rxedge_oldest_pending_age_seconds", "Age of the oldest pending movement (0 when none).", nil, nil)
	syncedDesc    = prometheus.NewDesc("rxedge_synced_total", "Movements ever synced to central.", nil, nil)
	fileDesc      = prometheus.NewDesc("rxedge_data_file_bytes", "Size of the data file.", nil, nil)
	freeDesc      = prometheus.NewDesc("rxedge_data_dir_free_bytes", "Free disk space for the data directory.", nil, nil)
	lastSyncDesc  = prometheus.NewDesc("rxedge_last_sync_timestamp_seconds", "Unix time of the last movement central acknowledged (0: none since start).", nil, nil)
	restoredDesc  = prometheus.NewDesc("rxedge_data_file_restored_timestamp_seconds", "Unix time the data file was found older than central's record of the store (a restored copy); 0 when never.", nil, nil)
	confirmDesc   = prometheus.NewDesc("rxedge_data_file_confirmed", "1 when the movements accepted since the start were checked against central's record of the store, 0 while they wait for it.", nil, nil)
	problemDesc   = prometheus.NewDesc("rxedge_connection_problem", "1 for the reason central cannot be reached or used now, 0 for the others.", []string{"reason"}, nil)
)

// connCollector reads the sender's connection at scrape time.
type connCollector struct{ conn func() status.Connection }

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lastSyncDesc
	ch <- problemDesc
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	conn := c.conn()
	last := 0.0
	if conn.LastSyncAt != nil {
		last = float64(conn.LastSyncAt.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(lastSyncDesc, prometheus.GaugeValue, last)
	for _, r := range status.ConnReasons {
		v := 0.0
		if conn.Problem != nil && conn.Problem.Reason == r {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(problemDesc, prometheus.GaugeValue, v, r)
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- movementsDesc
	ch <- oldestDesc
	ch <- syncedDesc
	ch <- fileDesc
	ch <- freeDesc
	ch <- restoredDesc
	ch <- confirmDesc
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
	l := c.q.Lineage()
	restored, confirmed := 0.0, 0.0
	if !l.RestoredAt.IsZero() {
		restored = float64(l.RestoredAt.UnixNano()) / 1e9
	}
	if l.Confirmed() {
		confirmed = 1
	}
	ch <- prometheus.MustNewConstMetric(restoredDesc, prometheus.GaugeValue, restored)
	ch <- prometheus.MustNewConstMetric(confirmDesc, prometheus.GaugeValue, confirmed)
	// A disk that cannot be asked leaves the series out, not the scrape.
	if free, err := disk.Free(s.Path); err == nil {
		ch <- prometheus.MustNewConstMetric(freeDesc, prometheus.GaugeValue, float64(free))
	}
}
