package status

import (
	"fmt"
	"strings"
	"time"
)

// Problem is one thing that needs attention. Code is stable, for scripts;
// Message is for people.
type Problem struct {
	Code     string `json:"code"`
	Severity string `json:"severity"` // SeverityWarning or SeverityCritical
	Message  string `json:"message"`
}

// Problem codes.
const (
	CodeAgentNotRunning = "agent_not_running" // no agent answers; judged only when Thresholds.RequireRunning
	CodeServiceStopped  = "service_stopped"   // the service manager says stopped or failed
	CodeConnection      = "connection"        // central cannot be reached or used (Connection.Problem)
	CodeDisconnected    = "disconnected"      // offline longer than the threshold
	CodeSyncPaused      = "sync_paused"       // central cannot take anything
	CodeQuarantined     = "quarantined"       // movements wait in the quarantine
	CodePendingOld      = "pending_old"       // the oldest pending movement is older than the threshold
	CodeDiskLow         = "disk_low"          // free disk of the data directory below the threshold
	CodeFileRestored    = "file_restored"     // the data file was found older than central's record (within RestoredNotice)
	CodeFileForeign     = "file_foreign"      // central's record names a data file this one does not know; nothing is sent
	CodeLineageSkipped  = "lineage_skipped"   // the start-up lineage check passed over records the store did not write
	CodeFileUnverified  = "file_unverified"   // only a record the store cannot trust names a data file this one does not know
)

// Severities of a Problem.
const (
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// Thresholds say when a value is a problem. A zero threshold is not
// checked. Quarantined counts at or above a threshold are a problem; free
// disk below one is.
type Thresholds struct {
	PendingAgeWarn, PendingAgeCrit     time.Duration
	QuarantinedWarn, QuarantinedCrit   uint64
	DisconnectedWarn, DisconnectedCrit time.Duration
	FreeDiskWarn, FreeDiskCrit         uint64
	// RequireRunning makes an agent that does not run a critical problem
	// (monitoring); otherwise reading a stopped agent's file is normal.
	RequireRunning bool
}

// PlainThresholds are the rules of plain `agent status`: anything
// quarantined, a pending movement older than maxAge, a paused sender, a
// connection problem that needs someone (central refuses the agent, or a
// store that never delivered cannot reach it), or an installed service
// that is stopped.
func PlainThresholds(maxAge time.Duration) Thresholds {
	return Thresholds{PendingAgeWarn: maxAge, QuarantinedWarn: 1}
}

// Judge lists the problems of s by th, the most severe first.
func (s *Status) Judge(th Thresholds) []Problem {
	var crit, warn []Problem
	add := func(critical bool, code, format string, args ...any) {
		p := Problem{Code: code, Severity: SeverityWarning, Message: fmt.Sprintf(format, args...)}
		if critical {
			p.Severity = SeverityCritical
			crit = append(crit, p)
			return
		}
		warn = append(warn, p)
	}
	level := func(v, w, c float64) (bad, critical bool) {
		switch {
		case c > 0 && v >= c:
			return true, true
		case w > 0 && v >= w:
			return true, false
		}
		return false, false
	}

	if !s.Agent.Running {
		if svc := s.Service; svc != nil && (svc.State == ServiceStopped || svc.State == ServiceFailed) {
			add(true, CodeServiceStopped, "the agent's service is %s: start it with `agent start`", svc.State)
		} else if th.RequireRunning {
			add(true, CodeAgentNotRunning, "no agent is running for this data directory")
		}
	}
	c := s.Connection
	if p := c.Problem; p != nil && connectionNeedsSomeone(s) {
		msg := "cannot use central: " + p.Reason
		if p.Detail != "" {
			msg += ", " + p.Detail
		}
		if p.Server != "" {
			msg += " from " + p.Server
		}
		add(refusedByCentral(p.Reason), CodeConnection, "%s", msg)
	}
	if c.State == Offline && c.Since != nil {
		d := s.GeneratedAt.Sub(*c.Since)
		if bad, critical := level(d.Seconds(), th.DisconnectedWarn.Seconds(), th.DisconnectedCrit.Seconds()); bad {
			add(critical, CodeDisconnected, "offline for %s", round(d))
		}
	}
	if c.State == Paused {
		add(false, CodeSyncPaused, "sync paused: %s", c.Reason)
	}
	if n := s.Counts.Quarantined.Total; n > 0 {
		if bad, critical := level(float64(n), float64(th.QuarantinedWarn), float64(th.QuarantinedCrit)); bad {
			add(critical, CodeQuarantined, "%d movement(s) quarantined: see `agent dlq list`", n)
		}
	}
	if s.OldestPendingAt != nil {
		if bad, critical := level(s.OldestPendingAge, th.PendingAgeWarn.Seconds(), th.PendingAgeCrit.Seconds()); bad {
			limit := th.PendingAgeWarn
			if critical {
				limit = th.PendingAgeCrit
			}
			add(critical, CodePendingOld, "oldest pending movement is %s old (threshold %s)", round(time.Duration(s.OldestPendingAge*float64(time.Second))), limit)
		}
	}
	if free := s.DataFile.FreeBytes; free > 0 || s.DataFile.Path != "" {
		switch {
		case th.FreeDiskCrit > 0 && free < th.FreeDiskCrit:
			add(true, CodeDiskLow, "%s free on the data file's disk (threshold %s)", Bytes(free), Bytes(th.FreeDiskCrit))
		case th.FreeDiskWarn > 0 && free < th.FreeDiskWarn:
			add(false, CodeDiskLow, "%s free on the data file's disk (threshold %s)", Bytes(free), Bytes(th.FreeDiskWarn))
		}
	}
	if l := s.DataFile.Lineage; l != nil && l.Foreign != "" {
		add(true, CodeFileForeign, "central's record of the store names data file %s, which this data file (%s) does not know: another data file gives the store's sequences (a cloned PC or VM?); nothing is sent until you stop the agent and run `agent data adopt` or `agent data discard`", l.Foreign, l.FileID)
	}
	if l := s.DataFile.Lineage; l != nil && l.RestoredAt != nil && s.GeneratedAt.Sub(*l.RestoredAt) < RestoredNotice {
		add(false, CodeFileRestored, "the data file was restored from an older copy (found %s): it continues after central's highest sequence %d as file %s; see the journal (action lineage)", l.RestoredAt.UTC().Format(time.RFC3339), l.Base, l.FileID)
	}
	judgeLineage(s, add)
	return append(crit, warn...)
}

// connectionNeedsSomeone reports whether s's connection problem needs
// someone: central refuses the agent (waiting will not help), or the agent
// cannot reach central and this store has never delivered a movement (a
// new store's address or port is wrong). A store that delivered before and
// cannot reach central now is offline, which is not a failure (DESIGN P4):
// its movements wait in the data file, and the disconnected thresholds
// judge how long is too long.
func connectionNeedsSomeone(s *Status) bool {
	p := s.Connection.Problem
	return p != nil && (refusedByCentral(p.Reason) || s.SyncedTotal == 0)
}

// Plugin exit codes of the Nagios/Icinga plugin contract.
const (
	CheckOK       = 0
	CheckWarning  = 1
	CheckCritical = 2
	CheckUnknown  = 3
)

var checkWords = [...]string{"OK", "WARNING", "CRITICAL", "UNKNOWN"}

// Check judges s by th for a monitoring system: the plugin exit code and
// the one status line, with performance data. readErr is why the status
// could not be read (then s is nil and the answer is UNKNOWN).
func Check(s *Status, readErr error, th Thresholds) (code int, line string) {
	if readErr != nil || s == nil {
		msg := "no status"
		if readErr != nil {
			msg = strings.ReplaceAll(readErr.Error(), "\n", " ")
		}
		return CheckUnknown, "RXEDGE UNKNOWN - cannot read the agent's status: " + strings.ReplaceAll(msg, "|", "/")
	}
	problems := s.Judge(th)
	code = CheckOK
	var msgs []string
	for _, p := range problems {
		if p.Severity == SeverityCritical {
			code = CheckCritical
		} else if code == CheckOK {
			code = CheckWarning
		}
		msgs = append(msgs, p.Message)
	}
	text := fmt.Sprintf("store %s, %s, %d pending, %d quarantined", s.StoreID, s.Connection.State, s.Counts.Pending.Total, s.Counts.Quarantined.Total)
	if len(msgs) > 0 {
		text = strings.Join(msgs, "; ")
	}
	return code, "RXEDGE " + checkWords[code] + " - " + strings.ReplaceAll(text, "|", "/") + " | " + perfData(s, th)
}

// perfData is the performance data of the check line, in the plugin
// format label=value[UOM];warn;crit;min;max.
func perfData(s *Status, th Thresholds) string {
	secs := func(d time.Duration) string {
		if d <= 0 {
			return ""
		}
		return fmt.Sprint(int64(d.Seconds()))
	}
	count := func(n uint64) string {
		if n == 0 {
			return ""
		}
		return fmt.Sprint(n)
	}
	// Free disk alerts below its thresholds: the range "N:".
	below := func(n uint64) string {
		if n == 0 {
			return ""
		}
		return fmt.Sprintf("%d:", n)
	}
	var disconnected int64
	if s.Connection.State == Offline && s.Connection.Since != nil {
		disconnected = int64(max(s.GeneratedAt.Sub(*s.Connection.Since).Seconds(), 0))
	}
	return strings.Join([]string{
		fmt.Sprintf("pending=%d;;;0;", s.Counts.Pending.Total),
		fmt.Sprintf("quarantined=%d;%s;%s;0;", s.Counts.Quarantined.Total, count(th.QuarantinedWarn), count(th.QuarantinedCrit)),
		fmt.Sprintf("oldest_pending_age=%ds;%s;%s;0;", int64(s.OldestPendingAge), secs(th.PendingAgeWarn), secs(th.PendingAgeCrit)),
		fmt.Sprintf("disconnected=%ds;%s;%s;0;", disconnected, secs(th.DisconnectedWarn), secs(th.DisconnectedCrit)),
		fmt.Sprintf("free_disk=%dB;%s;%s;0;", s.DataFile.FreeBytes, below(th.FreeDiskWarn), below(th.FreeDiskCrit)),
	}, " ")
}
