package sink

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the sink's Prometheus metrics and readiness. Safe for
// concurrent use.
type Metrics struct {
	reg       *prometheus.Registry
	pos       *prometheus.GaugeVec
	last      *prometheus.GaugeVec
	lag       *prometheus.GaugeVec
	messages  *prometheus.CounterVec
	rejects   *prometheus.CounterVec
	commits   *prometheus.CounterVec
	failures  *prometheus.CounterVec
	rewinds   *prometheus.CounterVec
	recreates *prometheus.CounterVec
	staged    *prometheus.CounterVec
	commitAt  *prometheus.GaugeVec
	commitDur prometheus.Histogram
	rate      prometheus.GaugeFunc

	ready atomic.Bool
	// dbDown is set by a failed write or ping, cleared by a commit or a
	// ping that answered.
	dbDown atomic.Bool

	mu       sync.Mutex
	posOf    map[string]uint64
	lastOf   map[string]uint64
	window   []sample // rows committed, for rows/s over the last rateWindow
	lastSeen time.Time
}

type sample struct {
	at   time.Time
	rows uint64
}

const rateWindow = 10 * time.Second

// NewMetrics returns the sink's metrics on a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		pos: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rxedge_sink_position",
			Help: "Highest archive sequence committed to PostgreSQL, per archive stream."}, []string{"archive"}),
		last: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rxedge_sink_archive_last_sequence",
			Help: "Last sequence of the archive stream when last looked at."}, []string{"archive"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rxedge_sink_lag_messages",
			Help: "Archive messages not yet committed to PostgreSQL, per archive stream."}, []string{"archive"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_sink_messages_total",
			Help: "Archive messages committed, by outcome (row, repeat, conflict, reject)."}, []string{"archive", "outcome"}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_sink_rejects_total",
			Help: "Archive messages set aside in sink_rejects, by reason: the header or field the sink could not take (a payload the agent's own validation would refuse names its field)."}, []string{"archive", "reason"}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_sink_commits_total",
			Help: "Transactions committed."}, []string{"archive"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_sink_write_failures_total",
			Help: "Batches whose transaction failed and was retried."}, []string{"archive"}),
		rewinds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_sink_rewinds_total",
			Help: "Times the stored position was found behind the last commit (a failover to a standby that had not received it): the archive is read again from the stored position."}, []string{"archive"}),
		recreates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_sink_archive_recreated_total",
			Help: "Times the archive stream was found created again (deleted and recreated by central's administrator): its earlier rows are kept under another name, and it is read from its start."}, []string{"archive"}),
		staged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rxedge_sink_staged_batches_total",
			Help: "Batches written through the staging table (INSERT ... ON CONFLICT) instead of a COPY straight into movements: the batch held a key already written (a repeat or a conflict), or the batch before it did."}, []string{"archive"}),
		commitAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rxedge_sink_last_commit_timestamp_seconds",
			Help: "When the last transaction of the archive stream committed (Unix time)."}, []string{"archive"}),
		commitDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rxedge_sink_commit_seconds",
			Help: "Time to write and commit one batch.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}),
		posOf:  map[string]uint64{},
		lastOf: map[string]uint64{},
	}
	m.rate = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rxedge_sink_rows_per_second",
		Help: "Archive messages committed per second over the last 10 seconds."}, m.RowsPerSecond)
	m.reg.MustRegister(m.pos, m.last, m.lag, m.messages, m.rejects, m.commits, m.failures, m.rewinds, m.recreates, m.staged, m.commitAt, m.commitDur, m.rate)
	return m
}

// RowsPerSecond is the rate of committed messages over the last 10 s.
func (m *Metrics) RowsPerSecond() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.trim(time.Now())
	var n uint64
	for _, s := range m.window {
		n += s.rows
	}
	return float64(n) / rateWindow.Seconds()
}

func (m *Metrics) trim(now time.Time) {
	i := 0
	for i < len(m.window) && now.Sub(m.window[i].at) > rateWindow {
		i++
	}
	m.window = m.window[i:]
}

func (m *Metrics) position(stream string, p uint64) {
	m.mu.Lock()
	m.posOf[stream] = p
	m.updateLag(stream)
	m.mu.Unlock()
	m.pos.WithLabelValues(stream).Set(float64(p))
}

func (m *Metrics) archiveLast(stream string, last uint64) {
	m.mu.Lock()
	if last > m.lastOf[stream] {
		m.lastOf[stream] = last
	}
	m.updateLag(stream)
	m.mu.Unlock()
	m.last.WithLabelValues(stream).Set(float64(last))
}

// updateLag is called with mu held.
func (m *Metrics) updateLag(stream string) {
	var lag uint64
	if l, p := m.lastOf[stream], m.posOf[stream]; l > p {
		lag = l - p
	}
	m.lag.WithLabelValues(stream).Set(float64(lag))
}

func (m *Metrics) committed(stream string, pos uint64, c Counts, staged bool, took time.Duration) {
	if staged {
		m.staged.WithLabelValues(stream).Inc()
	}
	now := time.Now()
	m.mu.Lock()
	m.window = append(m.window, sample{now, c.Total()})
	m.trim(now)
	m.lastSeen = now
	m.mu.Unlock()
	m.position(stream, pos)
	m.messages.WithLabelValues(stream, "row").Add(float64(c.Rows))
	m.messages.WithLabelValues(stream, "repeat").Add(float64(c.Repeats))
	m.messages.WithLabelValues(stream, "conflict").Add(float64(c.Conflicts))
	m.messages.WithLabelValues(stream, "reject").Add(float64(c.Rejects))
	m.commits.WithLabelValues(stream).Inc()
	m.commitAt.WithLabelValues(stream).Set(float64(now.UnixNano()) / 1e9)
	m.commitDur.Observe(took.Seconds())
	m.dbDown.Store(false)
}

// rejected counts the rejects of a committed batch by reason.
func (m *Metrics) rejected(stream string, reasons map[string]uint64) {
	for reason, n := range reasons {
		m.rejects.WithLabelValues(stream, reason).Add(float64(n))
	}
}

func (m *Metrics) failed(stream string) {
	m.failures.WithLabelValues(stream).Inc()
	m.dbDown.Store(true)
}

// rewound counts a position found behind the last commit, and sets the
// position to it.
func (m *Metrics) rewound(stream string, pos uint64) {
	m.rewinds.WithLabelValues(stream).Inc()
	m.position(stream, pos)
}

func (m *Metrics) recreated(stream string) {
	m.recreates.WithLabelValues(stream).Inc()
	m.position(stream, 0)
}

func (m *Metrics) dbState(up bool) { m.dbDown.Store(!up) }

// Ready reports whether the sink follows every archive and its database
// answered last time it was asked.
func (m *Metrics) Ready() bool { return m.ready.Load() && !m.dbDown.Load() }

func (m *Metrics) setReady(v bool) { m.ready.Store(v) }

// Gatherer is the registry of the sink's metrics, for a service that
// serves them with its own (hq run).
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Handler serves /metrics and /readyz: ready once the sink has checked
// the schema and started following every archive, until it stops, and
// while PostgreSQL answers.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !m.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	return mux
}
