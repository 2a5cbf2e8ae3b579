package metrics

import "github.com/prometheus/client_golang/prometheus"

var hl7RefusalDesc = prometheus.NewDesc("rxedge_intake_hl7_refusals_total",
	"Connections and messages the HL7 listener refused or closed since start, by reason (the reasons of the HL7_REFUSED log line).",
	[]string{"reason"}, nil)

// WatchHL7Refusals exports the HL7 listener's refusals, read from counts
// at scrape time: a series for each of reasons, from the start.
func (m *Metrics) WatchHL7Refusals(reasons []string, counts func() map[string]uint64) {
	if m == nil || counts == nil {
		return
	}
	m.reg.MustRegister(&hl7RefusalCollector{reasons: reasons, counts: counts})
}

type hl7RefusalCollector struct {
	reasons []string
	counts  func() map[string]uint64
}

func (c *hl7RefusalCollector) Describe(ch chan<- *prometheus.Desc) { ch <- hl7RefusalDesc }

func (c *hl7RefusalCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.counts()
	for _, r := range c.reasons {
		ch <- prometheus.MustNewConstMetric(hl7RefusalDesc, prometheus.CounterValue, float64(counts[r]), r)
	}
}
