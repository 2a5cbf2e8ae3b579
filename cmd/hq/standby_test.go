//go:build unix

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/rxedge/agent/testkit/agentbin"
)

// leasedJobs are the jobs of hq run that take a lease.
var leasedJobs = []string{"sink", "witness", "verify", "reconcile"}

// secondConfig writes the settings of a second hq run: the first's, with
// a listener and a state directory of its own (another host's).
func (r *hqRig) secondConfig(t *testing.T) (config, metrics string) {
	t.Helper()
	b, err := os.ReadFile(r.config)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	metrics = agentbin.FreeAddr(t)
	text := regexp.MustCompile(`(?m)^listen: .*$`).ReplaceAllLiteralString(string(b), "listen: "+metrics)
	text = regexp.MustCompile(`(?m)^state_dir: .*$`).ReplaceAllLiteralString(text, "state_dir: "+dir)
	return writeFile(t, filepath.Join(dir, "hq.yaml"), text), metrics
}

// leases counts the leased jobs whose lease the service of m holds, and
// those it waits for as a standby.
func leases(m map[string]float64) (held, standby int) {
	for _, j := range leasedJobs {
		if m[`rxedge_hq_job_lease_held{job="`+j+`"}`] == 1 {
			held++
		}
		if m[`rxedge_hq_job_state{job="`+j+`",state="standby"}`] == 1 {
			standby++
		}
	}
	return held, standby
}

// TestServiceStandbyTakesOver runs two hq run against the same central
// and PostgreSQL: the first holds every job's lease and writes, the
// second waits as a standby for each (rxedge_hq_job_lease_held 0, its
// jobs standby, /readyz 200). Killed with SIGKILL, the first's leases
// go with its connections, and the second takes every job over within
// takeoverBound and writes what comes next.
func TestServiceStandbyTakesOver(t *testing.T) {
	// PostgreSQL ends a killed process's sessions, and their advisory
	// locks, as soon as their sockets close; a standby asks for each
	// lease every second (service.DefaultLeasePoll).
	const takeoverBound = 30 * time.Second
	r := newHQRig(t)
	first := r.start(t)
	eventually(t, "the first service holds every lease and writes the 15 movements", func() bool {
		held, _ := leases(scrape(r.metrics))
		return held == len(leasedJobs) && r.count(t, `SELECT count(*) FROM movements`) == 15
	})
	config2, metrics2 := r.secondConfig(t)
	r.startWith(t, config2)
	eventually(t, "the second service waits as a standby for every lease", func() bool {
		held, standby := leases(scrape(metrics2))
		return held == 0 && standby == len(leasedJobs)
	})
	if held, _ := leases(scrape(r.metrics)); held != len(leasedJobs) {
		t.Fatalf("the first service holds %d leases of %d with a standby running", held, len(leasedJobs))
	}
	if code := get(t, "http://"+metrics2+"/readyz"); code != 200 {
		t.Errorf("the standby's /readyz: %d, want 200", code)
	}

	first.kill(t)
	killed := time.Now()
	eventually(t, "the standby takes every lease over", func() bool {
		held, _ := leases(scrape(metrics2))
		return held == len(leasedJobs)
	})
	took := time.Since(killed)
	t.Logf("the standby held every lease %s after the first service was killed", took.Round(time.Millisecond))
	if took > takeoverBound {
		t.Errorf("the standby took %s to take the jobs over, want at most %s", took, takeoverBound)
	}
	wit := r.witnessed(t)
	r.submit(t, "S0002", 5, 8)
	eventually(t, "the new holder's sink writes the new movements and its witness countersigns", func() bool {
		return r.count(t, `SELECT count(*) FROM movements`) == 18 && r.witnessed(t) > wit
	})
}

// get is the status of a GET of url; 0 when it is not answered.
func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
