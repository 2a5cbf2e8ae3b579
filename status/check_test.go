package status

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCheck pins the plugin contract: every state, its exit code and its
// one line with performance data.
func TestCheck(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	th := Thresholds{
		PendingAgeWarn: time.Hour, PendingAgeCrit: 4 * time.Hour,
		QuarantinedWarn: 1, QuarantinedCrit: 100,
		DisconnectedWarn: 15 * time.Minute, DisconnectedCrit: time.Hour,
		FreeDiskWarn: 1 << 30, FreeDiskCrit: 256 << 20,
		RequireRunning: true,
	}
	healthy := func() *Status {
		return &Status{
			StoreID:     "S0042",
			Agent:       Agent{Running: true, Version: "v1"},
			Service:     &Service{State: ServiceRunning},
			Connection:  Connection{State: Online},
			DataFile:    DataFile{Path: "agent.db", FreeBytes: 10 << 30},
			GeneratedAt: now,
		}
	}
	perf := func(pending, quar, age, disc int, free uint64) string {
		return " | pending=" + itoa(pending) + ";;;0; quarantined=" + itoa(quar) + ";1;100;0; oldest_pending_age=" + itoa(age) +
			"s;3600;14400;0; disconnected=" + itoa(disc) + "s;900;3600;0; free_disk=" + utoa(free) + "B;1073741824:;268435456:;0;"
	}
	tests := []struct {
		name   string
		mod    func(s *Status)
		err    error
		code   int
		line   string
		codes  []string
		noPerf bool
	}{
		{name: "ok", mod: func(s *Status) {}, code: CheckOK,
			line: "RXEDGE OK - store S0042, online, 0 pending, 0 quarantined" + perf(0, 0, 0, 0, 10<<30)},
		{name: "unreadable", err: errors.New("no agent data file at x | y"), code: CheckUnknown, noPerf: true,
			line: "RXEDGE UNKNOWN - cannot read the agent's status: no agent data file at x / y"},
		{name: "agent not running", mod: func(s *Status) {
			s.Agent.Running, s.Service, s.Connection = false, &Service{State: ServiceNotInstalled}, Connection{State: Stopped}
		}, code: CheckCritical, codes: []string{CodeAgentNotRunning},
			line: "RXEDGE CRITICAL - no agent is running for this data directory" + perf(0, 0, 0, 0, 10<<30)},
		{name: "service stopped", mod: func(s *Status) {
			s.Agent.Running, s.Service, s.Connection = false, &Service{State: ServiceStopped}, Connection{State: Stopped}
		}, code: CheckCritical, codes: []string{CodeServiceStopped},
			line: "RXEDGE CRITICAL - the agent's service is stopped: start it with `agent start`" + perf(0, 0, 0, 0, 10<<30)},
		{name: "service failed", mod: func(s *Status) {
			s.Agent.Running, s.Service, s.Connection = false, &Service{State: ServiceFailed}, Connection{State: Stopped}
		}, code: CheckCritical, codes: []string{CodeServiceStopped},
			line: "RXEDGE CRITICAL - the agent's service is failed: start it with `agent start`" + perf(0, 0, 0, 0, 10<<30)},
		{name: "one quarantined", mod: func(s *Status) { s.Counts.Quarantined.Total = 1 }, code: CheckWarning, codes: []string{CodeQuarantined},
			line: "RXEDGE WARNING - 1 movement(s) quarantined: see `agent dlq list`" + perf(0, 1, 0, 0, 10<<30)},
		{name: "many quarantined", mod: func(s *Status) { s.Counts.Quarantined.Total = 100 }, code: CheckCritical, codes: []string{CodeQuarantined},
			line: "RXEDGE CRITICAL - 100 movement(s) quarantined: see `agent dlq list`" + perf(0, 100, 0, 0, 10<<30)},
		{name: "pending old", mod: func(s *Status) {
			s.Counts.Pending.Total, s.OldestPendingAt, s.OldestPendingAge = 3, ago(2*time.Hour), 7200
		}, code: CheckWarning, codes: []string{CodePendingOld},
			line: "RXEDGE WARNING - oldest pending movement is 2h0m0s old (threshold 1h0m0s)" + perf(3, 0, 7200, 0, 10<<30)},
		{name: "pending very old", mod: func(s *Status) {
			s.Counts.Pending.Total, s.OldestPendingAt, s.OldestPendingAge = 3, ago(5*time.Hour), 18000
		}, code: CheckCritical, codes: []string{CodePendingOld},
			line: "RXEDGE CRITICAL - oldest pending movement is 5h0m0s old (threshold 4h0m0s)" + perf(3, 0, 18000, 0, 10<<30)},
		{name: "offline briefly", mod: func(s *Status) { s.Connection = Connection{State: Offline, Since: ago(time.Minute)} }, code: CheckOK,
			line: "RXEDGE OK - store S0042, offline, 0 pending, 0 quarantined" + perf(0, 0, 0, 60, 10<<30)},
		{name: "offline long", mod: func(s *Status) { s.Connection = Connection{State: Offline, Since: ago(20 * time.Minute)} }, code: CheckWarning,
			codes: []string{CodeDisconnected},
			line:  "RXEDGE WARNING - offline for 20m0s" + perf(0, 0, 0, 1200, 10<<30)},
		{name: "offline very long", mod: func(s *Status) { s.Connection = Connection{State: Offline, Since: ago(2 * time.Hour)} }, code: CheckCritical,
			codes: []string{CodeDisconnected},
			line:  "RXEDGE CRITICAL - offline for 2h0m0s" + perf(0, 0, 0, 7200, 10<<30)},
		{name: "line down", mod: func(s *Status) {
			s.Connection = Connection{State: Offline, Since: ago(time.Minute), Problem: &ConnProblem{Reason: ReasonRefused, Detail: "connection refused", Server: "nats://central:4222"}}
		}, code: CheckWarning, codes: []string{CodeConnection},
			line: "RXEDGE WARNING - cannot use central: refused, connection refused from nats://central:4222" + perf(0, 0, 0, 60, 10<<30)},
		{name: "line down at a store that delivered before", mod: func(s *Status) {
			s.SyncedTotal = 10
			s.Connection = Connection{State: Offline, Since: ago(time.Minute), Problem: &ConnProblem{Reason: ReasonRefused, Detail: "connection refused", Server: "nats://central:4222"}}
		}, code: CheckOK,
			line: "RXEDGE OK - store S0042, offline, 0 pending, 0 quarantined" + perf(0, 0, 0, 60, 10<<30)},
		{name: "refused by central", mod: func(s *Status) {
			s.Connection = Connection{State: Offline, Since: ago(time.Minute), Problem: &ConnProblem{Reason: ReasonAuthorization, Detail: "authorization violation", Server: "nats://central:4222"}}
		}, code: CheckCritical, codes: []string{CodeConnection},
			line: "RXEDGE CRITICAL - cannot use central: authorization, authorization violation from nats://central:4222" + perf(0, 0, 0, 60, 10<<30)},
		{name: "paused", mod: func(s *Status) { s.Connection = Connection{State: Paused, Reason: "stream full"} }, code: CheckWarning,
			codes: []string{CodeSyncPaused},
			line:  "RXEDGE WARNING - sync paused: stream full" + perf(0, 0, 0, 0, 10<<30)},
		{name: "disk low", mod: func(s *Status) { s.DataFile.FreeBytes = 512 << 20 }, code: CheckWarning, codes: []string{CodeDiskLow},
			line: "RXEDGE WARNING - 512.0 MiB free on the data file's disk (threshold 1.0 GiB)" + perf(0, 0, 0, 0, 512<<20)},
		{name: "disk full", mod: func(s *Status) { s.DataFile.FreeBytes = 0 }, code: CheckCritical, codes: []string{CodeDiskLow},
			line: "RXEDGE CRITICAL - 0 B free on the data file's disk (threshold 256.0 MiB)" + perf(0, 0, 0, 0, 0)},
		{name: "critical first", mod: func(s *Status) {
			s.Counts.Quarantined.Total = 2
			s.Agent.Running, s.Service, s.Connection = false, &Service{State: ServiceStopped}, Connection{State: Stopped}
		}, code: CheckCritical, codes: []string{CodeServiceStopped, CodeQuarantined},
			line: "RXEDGE CRITICAL - the agent's service is stopped: start it with `agent start`; 2 movement(s) quarantined: see `agent dlq list`" + perf(0, 2, 0, 0, 10<<30)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s *Status
			if tt.mod != nil {
				s = healthy()
				tt.mod(s)
			}
			code, line := Check(s, tt.err, th)
			if code != tt.code || line != tt.line {
				t.Errorf("got  %d %q\nwant %d %q", code, line, tt.code, tt.line)
			}
			if strings.Count(line, "\n") != 0 || strings.Count(line, "|") != 1 && !tt.noPerf {
				t.Errorf("not one line with one performance data part: %q", line)
			}
			if s != nil {
				var codes []string
				for _, p := range s.Judge(th) {
					codes = append(codes, p.Code)
				}
				if strings.Join(codes, ",") != strings.Join(tt.codes, ",") {
					t.Errorf("problem codes %v, want %v", codes, tt.codes)
				}
			}
		})
	}
}

// TestPlainProblems: plain `agent status` needs attention for what its
// README says, and not for a stopped agent that was never installed.
func TestPlainProblems(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	base := Status{StoreID: "S1", Connection: Connection{State: Stopped}, Service: &Service{State: ServiceNotInstalled}, GeneratedAt: now}
	tests := []struct {
		name string
		mod  func(s *Status)
		want []string
	}{
		{"stopped, not installed", func(s *Status) {}, nil},
		{"installed and stopped", func(s *Status) { s.Service.State = ServiceStopped }, []string{CodeServiceStopped}},
		{"quarantined", func(s *Status) { s.Counts.Quarantined.Total = 1 }, []string{CodeQuarantined}},
		{"paused", func(s *Status) { s.Agent.Running, s.Connection = true, Connection{State: Paused, Reason: "x"} }, []string{CodeSyncPaused}},
		{"refused", func(s *Status) {
			s.Agent.Running, s.Connection = true, Connection{State: Offline, Problem: &ConnProblem{Reason: ReasonAuth}}
		}, []string{CodeConnection}},
		{"offline long without problem", func(s *Status) {
			since := now.Add(-48 * time.Hour)
			s.Agent.Running, s.Connection = true, Connection{State: Offline, Since: &since}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			svc := *base.Service
			s.Service = &svc
			tt.mod(&s)
			var got []string
			for _, p := range s.Judge(PlainThresholds(time.Hour)) {
				got = append(got, p.Code)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func itoa(n int) string    { return strconv.Itoa(n) }
func utoa(n uint64) string { return strconv.FormatUint(n, 10) }
