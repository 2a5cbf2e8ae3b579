package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rxedge/agent/status"
)

var (
	intakeDesc      = prometheus.NewDesc("rxedge_intake_movements_total", "Movements taken since start, by intake (http, hl7, asap) and result (accepted, duplicate, rejected).", []string{"intake", "result"}, nil)
	intakeLastDesc  = prometheus.NewDesc("rxedge_intake_last_received_timestamp_seconds", "Unix time an intake last received anything (0: nothing since start).", []string{"intake"}, nil)
	intakeFileDesc  = prometheus.NewDesc("rxedge_intake_files_total", "ASAP files finished since start, by result (done, rejected), and files set aside (set_aside: left in the folder, unable to be taken, counted once per file and reason).", []string{"result"}, nil)
	intakeAsideDesc = prometheus.NewDesc("rxedge_intake_files_set_aside", "ASAP files the drop folder holds now and cannot take (not regular files, unreadable, written to while read, or impossible to move out).", nil, nil)
)

// WatchIntakes exports the per-intake counters intakes reports, read at
// scrape time. Labels are the intakes' names and results only.
func (m *Metrics) WatchIntakes(intakes func() []status.Intake) {
	if m == nil || intakes == nil {
		return
	}
	m.reg.MustRegister(&intakeCollector{intakes: intakes})
}

type intakeCollector struct{ intakes func() []status.Intake }

func (c *intakeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- intakeDesc
	ch <- intakeLastDesc
	ch <- intakeFileDesc
	ch <- intakeAsideDesc
}

func (c *intakeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, in := range c.intakes() {
		ch <- prometheus.MustNewConstMetric(intakeDesc, prometheus.CounterValue, float64(in.Accepted), in.Name, "accepted")
		ch <- prometheus.MustNewConstMetric(intakeDesc, prometheus.CounterValue, float64(in.Duplicates), in.Name, "duplicate")
		ch <- prometheus.MustNewConstMetric(intakeDesc, prometheus.CounterValue, float64(in.Rejected), in.Name, "rejected")
		last := 0.0
		if in.LastReceivedAt != nil {
			last = float64(in.LastReceivedAt.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(intakeLastDesc, prometheus.GaugeValue, last, in.Name)
		if in.Name == "asap" {
			ch <- prometheus.MustNewConstMetric(intakeFileDesc, prometheus.CounterValue, float64(in.FilesDone), "done")
			ch <- prometheus.MustNewConstMetric(intakeFileDesc, prometheus.CounterValue, float64(in.FilesRejected), "rejected")
			ch <- prometheus.MustNewConstMetric(intakeFileDesc, prometheus.CounterValue, float64(in.FilesSetAsideTotal), "set_aside")
			ch <- prometheus.MustNewConstMetric(intakeAsideDesc, prometheus.GaugeValue, float64(in.FilesSetAside))
		}
	}
}
