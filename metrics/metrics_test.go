package metrics

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rxedge/agent/status"
)

// TestCentralProblemSeriesFromStart: every reason's series is there at 0
// before anything happened, so alerts and dashboards need no "absent"; the
// gauge holds one reason at a time.
func TestCentralProblemSeriesFromStart(t *testing.T) {
	m := New(nil)
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	body := scrape()
	for _, r := range status.ConnReasons {
		for _, name := range []string{"rxedge_central_problem", "rxedge_central_errors_total"} {
			if line := fmt.Sprintf("%s{reason=%q} 0\n", name, r); !strings.Contains(body, line) {
				t.Errorf("no %q at start", line)
			}
		}
	}
	m.SetCentralProblem(status.ReasonAuth)
	m.SetCentralProblem(status.ReasonTLS)
	m.CentralError(status.ReasonTLS)
	body = scrape()
	for _, line := range []string{
		`rxedge_central_problem{reason="tls"} 1`, `rxedge_central_problem{reason="authentication"} 0`,
		`rxedge_central_errors_total{reason="tls"} 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("no %q after a change of reason", line)
		}
	}
	m.SetCentralProblem("")
	if strings.Contains(scrape(), `rxedge_central_problem{reason="tls"} 1`) {
		t.Error("the reason stays set after it cleared")
	}
	var nilM *Metrics
	nilM.SetCentralProblem(status.ReasonTLS)
	nilM.CentralError(status.ReasonTLS)
}
