// Package status is the agent's status document: what `agent status`
// prints, what GET /v1/status and the remote rx.ctl.<store>.status answer,
// and what the heartbeat carries (package status/builder assembles it). It
// holds counts, states, times and reasons only — never movement payloads
// (DESIGN P6), and links nothing of the store's (no bbolt), so head office
// reads it too.
//
// Judge decides what needs attention by thresholds, as problems with
// stable codes; Check turns that into the Nagios/Icinga plugin answer (exit
// code and one line with performance data). Both are pure functions of the
// document, tested as tables.
package status

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Connection states.
const (
	Online  = "online"
	Offline = "offline"
	Paused  = "paused"
	Stopped = "stopped" // the agent is not running (status read from the file)
	Idle    = "idle"    // running with no central servers configured
)

// Status is the whole status document.
type Status struct {
	StoreID    string     `json:"store_id"`
	Agent      Agent      `json:"agent"`
	Service    *Service   `json:"service,omitempty"` // system service, when asked
	Connection Connection `json:"connection"`
	Counts     Counts     `json:"counts"`
	// SyncedTotal counts every movement ever synced, including keys pruned
	// after the retention horizon.
	SyncedTotal uint64 `json:"synced_total"`
	// HighestSeq is the last per-store sequence (Rx-Seq) the agent
	// assigned: every movement from 1 to HighestSeq was acknowledged, which
	// is what central's reconciliation checks its archive against.
	HighestSeq uint64 `json:"highest_seq"`
	Leased     int    `json:"in_flight"`
	// OldestPendingAt is when the oldest pending movement was accepted.
	OldestPendingAt *time.Time `json:"oldest_pending_at,omitempty"`
	// OldestPendingAge is its age in seconds, at GeneratedAt.
	OldestPendingAge float64  `json:"oldest_pending_age_seconds"`
	Rates            Rates    `json:"rates"`
	DataFile         DataFile `json:"data_file"`
	// Intakes counts what each intake took since the agent started.
	Intakes []Intake `json:"intakes,omitempty"`
	// Ledger is the store's verifiable log and its signing key.
	Ledger      *Ledger   `json:"ledger,omitempty"`
	GeneratedAt time.Time `json:"generated_at"`
	// Judged is what the reader of the document judged needs attention,
	// with the thresholds it was given (see Judge); the agent itself
	// leaves it empty.
	Judged []Problem `json:"problems,omitempty"`
}

// Ledger is the store's log (DESIGN P9): its public key (the note
// verifier key that goes into the roster after the store id), the log as
// it stands, and its newest checkpoint.
type Ledger struct {
	PublicKey string `json:"public_key,omitempty"`
	// KeyLostAt is when the agent made a new key because the key file was
	// missing: the new public key must go into the roster.
	KeyLostAt *time.Time `json:"key_lost_at,omitempty"`
	Log       string     `json:"log"`
	First     uint64     `json:"first_seq"`
	Size      int64      `json:"size"`
	// Signed and Published are the sizes of the log's newest signed and
	// newest acknowledged checkpoints.
	Signed           int64      `json:"signed"`
	Published        int64      `json:"published"`
	LastCheckpointAt *time.Time `json:"last_checkpoint_at,omitempty"`
	// LastCheckpointKey names the key that signed the newest checkpoint
	// ("rxedge-store-S0042+1a2b3c4d", the start of its public key). When
	// PublicKey does not start with it, the key changed since (rotated or
	// lost): the roster needs the new public key to verify what comes.
	LastCheckpointKey string `json:"last_checkpoint_key,omitempty"`
	// Error is the notary's last failure to sign or publish.
	Error string `json:"error,omitempty"`
}

// Intake is what one intake (http, hl7, asap) took since the agent
// started: movements accepted, duplicates, rejected, and when it last
// received anything; for the ASAP drop folder, files done and rejected,
// and files it left in the folder unable to take them (set aside: not
// regular files, unreadable, written to while read, or impossible to move
// out), now and since start.
type Intake struct {
	Name           string     `json:"name"`
	Accepted       uint64     `json:"accepted"`
	Duplicates     uint64     `json:"duplicates"`
	Rejected       uint64     `json:"rejected"`
	LastReceivedAt *time.Time `json:"last_received_at,omitempty"`
	FilesDone      uint64     `json:"files_done,omitempty"`
	FilesRejected  uint64     `json:"files_rejected,omitempty"`
	// FilesSetAside counts the files set aside in the folder now; the log
	// line ASAP_FILE_SET_ASIDE of each says why.
	FilesSetAside      uint64 `json:"files_set_aside,omitempty"`
	FilesSetAsideTotal uint64 `json:"files_set_aside_total,omitempty"`
}

// Service is the system service as the service manager reports it.
type Service struct {
	// State is one word: running, stopped, failed, not-installed or
	// unknown.
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"` // why it is unknown, when it is
}

// String is the state and, when the service manager could not be asked,
// why: "unknown (systemd does not manage this machine)".
func (s *Service) String() string {
	if s == nil {
		return ServiceUnknown
	}
	if s.Detail != "" {
		return s.State + " (" + s.Detail + ")"
	}
	return s.State
}

// Service states.
const (
	ServiceRunning      = "running"
	ServiceStopped      = "stopped"
	ServiceFailed       = "failed"
	ServiceNotInstalled = "not-installed"
	ServiceUnknown      = "unknown"
)

// Agent describes the agent process.
type Agent struct {
	Running   bool       `json:"running"`
	Version   string     `json:"version"`
	PID       int        `json:"pid,omitempty"`
	StartedAt *time.Time `json:"started_at,omitempty"`
}

// Connection is the sender's view of central.
type Connection struct {
	State         string     `json:"state"`
	Reason        string     `json:"reason,omitempty"` // why paused or offline
	Since         *time.Time `json:"since,omitempty"`
	Servers       []string   `json:"servers,omitempty"`
	ConnectedURL  string     `json:"connected_url,omitempty"`
	LastSyncAt    *time.Time `json:"last_sync_at,omitempty"`
	LastErrorKind string     `json:"last_error_kind,omitempty"`
	LastErrorAt   *time.Time `json:"last_error_at,omitempty"`
	// Problem is why the agent cannot reach or use central, while it
	// cannot; nil when connected, idle or stopped.
	Problem *ConnProblem `json:"problem,omitempty"`
}

// ConnProblem is why the agent cannot reach or use central.
type ConnProblem struct {
	Reason string     `json:"reason"` // one of ConnReasons
	Detail string     `json:"detail,omitempty"`
	Server string     `json:"server,omitempty"` // the URL, without credentials
	Since  *time.Time `json:"since,omitempty"`
}

// Reasons of a ConnProblem: a bounded set, so each can be a metric label.
const (
	ReasonRefused       = "refused"        // nothing listens on the port
	ReasonDNS           = "dns"            // the host name does not resolve
	ReasonTimeout       = "timeout"        // no answer in time
	ReasonTLS           = "tls"            // handshake or certificate problem
	ReasonAuth          = "authentication" // wrong or expired credentials
	ReasonAuthorization = "authorization"  // credentials accepted, permission denied
	ReasonNoJetStream   = "no_jetstream"   // the server has JetStream disabled
	ReasonNoStream      = "stream_missing" // the movements stream does not exist
	ReasonOther         = "other"
)

// ConnReasons lists every Reason a ConnProblem may carry.
var ConnReasons = []string{ReasonRefused, ReasonDNS, ReasonTimeout, ReasonTLS, ReasonAuth, ReasonAuthorization, ReasonNoJetStream, ReasonNoStream, ReasonOther}

// refusedByCentral reports whether a connection problem is central
// refusing this agent, which does not heal by waiting.
func refusedByCentral(reason string) bool {
	switch reason {
	case ReasonTLS, ReasonAuth, ReasonAuthorization, ReasonNoJetStream, ReasonNoStream:
		return true
	}
	return false
}

// Counts are the movements per state and class.
type Counts struct {
	Pending     ClassCounts `json:"pending"`
	Synced      ClassCounts `json:"synced"`
	Quarantined ClassCounts `json:"quarantined"`
	Purged      ClassCounts `json:"purged"`
}

// ClassCounts splits a count by class.
type ClassCounts struct {
	Controlled uint64 `json:"controlled"`
	Ordinary   uint64 `json:"ordinary"`
	Total      uint64 `json:"total"`
}

// Rates are recent throughput, per minute, over the last five minutes.
type Rates struct {
	AcceptedPerMinute    float64 `json:"accepted_per_minute"`
	SyncedPerMinute      float64 `json:"synced_per_minute"`
	QuarantinedPerMinute float64 `json:"quarantined_per_minute"`
}

// DataFile describes the bbolt file and its disk.
type DataFile struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
	FreeBytes uint64 `json:"free_disk_bytes"`
	Schema    uint64 `json:"schema_version"`
	// Lineage is where the data file comes from (see queue.Lineage).
	Lineage *FileLineage `json:"lineage,omitempty"`
}

// FileLineage is the data file's identity and where it comes from.
type FileLineage struct {
	FileID string `json:"file_id"`
	// Origin: new, migrated, replaced (a new file that continues after
	// Prev), restored (an older copy that continues after central's
	// record under a new identity) or adopted.
	Origin string     `json:"origin"`
	Prev   string     `json:"prev_file_id,omitempty"`
	Base   uint64     `json:"base_seq,omitempty"` // the sequence the file continued past
	At     *time.Time `json:"at,omitempty"`
	// Confirmed is false while the movements accepted since the start wait
	// for central's record of the store before they are sent.
	Confirmed  bool       `json:"confirmed"`
	RestoredAt *time.Time `json:"restored_at,omitempty"`
	// Foreign is the data file central's record names that this file
	// does not know: another data file gives the store's sequences, and
	// this one sends nothing until an operator decides.
	Foreign string `json:"foreign_file_id,omitempty"`
	// Check is the running agent's check of the file against central's
	// record at its start; absent when the agent does not run or has no
	// central servers.
	Check *LineageCheck `json:"check,omitempty"`
}

// RestoredNotice is how long after a restored data file was found the
// status reports it.
const RestoredNotice = 7 * 24 * time.Hour

// Problems is the text of what makes the store need attention by the
// plain rules (see Judge with PlainThresholds). `agent status` exits 3 when
// there is any, for monitoring systems.
func (s *Status) Problems(maxAge time.Duration) []string {
	var out []string
	for _, p := range s.Judge(PlainThresholds(maxAge)) {
		out = append(out, p.Message)
	}
	return out
}

// reasonText says each reason of a ConnProblem in words.
var reasonText = map[string]string{
	ReasonRefused:       "connection refused",
	ReasonDNS:           "host name does not resolve",
	ReasonTimeout:       "no answer in time",
	ReasonTLS:           "TLS failed",
	ReasonAuth:          "authentication failed",
	ReasonAuthorization: "permission denied",
	ReasonNoJetStream:   "JetStream not enabled",
	ReasonNoStream:      "no movement stream answers for this store (not provisioned, or a partitioned central without this store's mapping: see `agent doctor`)",
	ReasonOther:         "error",
}

// String is the problem in words: what, the detail in the server's or the
// system's words, and from which server.
func (p *ConnProblem) String() string {
	s, ok := reasonText[p.Reason]
	if !ok {
		s = p.Reason
	}
	if p.Detail != "" {
		s += " (" + p.Detail + ")"
	}
	if p.Server != "" {
		s += " from " + p.Server
	}
	return s
}

// Render writes the human view of s.
func Render(w io.Writer, s *Status, maxAge time.Duration) {
	var b strings.Builder
	renderAgent(&b, s)
	renderCentral(&b, s)
	renderCounts(&b, s)
	renderQueue(&b, s)
	renderLineage(&b, s)
	renderIntakes(&b, s)
	renderLedger(&b, s)
	renderAttention(&b, s, maxAge)
	io.WriteString(w, b.String())
}

// agentState is the agent's state in words: stopped, or running with its
// process and uptime when known.
func agentState(s *Status) string {
	run := "stopped"
	if s.Agent.Running {
		run = "running"
		if s.Agent.PID > 0 {
			run += fmt.Sprintf(" (pid %d", s.Agent.PID)
			if s.Agent.StartedAt != nil {
				run += ", up " + round(s.GeneratedAt.Sub(*s.Agent.StartedAt)).String()
			}
			run += ")"
		}
	}
	return run
}

// renderAgent writes the store, the agent and the service, when known.
func renderAgent(b *strings.Builder, s *Status) {
	fmt.Fprintf(b, "Store       %s\n", s.StoreID)
	fmt.Fprintf(b, "Agent       %s, version %s\n", agentState(s), s.Agent.Version)
	if s.Service != nil {
		svc := s.Service.State
		if s.Service.Detail != "" {
			svc += " (" + s.Service.Detail + ")"
		}
		fmt.Fprintf(b, "Service     %s\n", svc)
	}
}

// connectionState is the connection to central in words: its state with
// its reason and duration, or its problem and since when.
func connectionState(s *Status) string {
	c := s.Connection
	state := c.State
	if c.Reason != "" {
		state += " (" + c.Reason + ")"
	}
	if c.Since != nil {
		state += " for " + round(s.GeneratedAt.Sub(*c.Since)).String()
	}
	if p := c.Problem; p != nil {
		state = c.State + ": " + p.String()
		if p.Since != nil {
			state += ", since " + p.Since.UTC().Format(time.DateTime) + " UTC (" + ago(p.Since, s.GeneratedAt) + ")"
		}
	}
	return state
}

// renderCentral writes the connection to central, its servers, the last
// sync and the last error.
func renderCentral(b *strings.Builder, s *Status) {
	c := s.Connection
	fmt.Fprintf(b, "Central     %s\n", connectionState(s))
	if len(c.Servers) > 0 {
		fmt.Fprintf(b, "Servers     %s", strings.Join(c.Servers, ", "))
		if c.ConnectedURL != "" {
			fmt.Fprintf(b, " (connected to %s)", c.ConnectedURL)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "Last sync   %s\n", ago(c.LastSyncAt, s.GeneratedAt))
	if c.LastErrorKind != "" {
		fmt.Fprintf(b, "Last error  %s, %s\n", c.LastErrorKind, ago(c.LastErrorAt, s.GeneratedAt))
	}
}

// renderCounts writes the table of movements by state and class.
func renderCounts(b *strings.Builder, s *Status) {
	b.WriteString("\n             total  controlled  ordinary\n")
	row := func(name string, cc ClassCounts) {
		fmt.Fprintf(b, "%-11s %7d  %10d  %8d\n", name, cc.Total, cc.Controlled, cc.Ordinary)
	}
	row("Pending", s.Counts.Pending)
	row("Synced", s.Counts.Synced)
	row("Quarantined", s.Counts.Quarantined)
	if s.Counts.Purged.Total > 0 {
		row("Purged", s.Counts.Purged)
	}
	b.WriteString("\n")
}

// renderQueue writes the oldest pending movement, the movements in
// flight, the rates and the data file.
func renderQueue(b *strings.Builder, s *Status) {
	if s.OldestPendingAt != nil {
		fmt.Fprintf(b, "Oldest pending  %s old\n", round(time.Duration(s.OldestPendingAge*float64(time.Second))))
	} else {
		b.WriteString("Oldest pending  none\n")
	}
	fmt.Fprintf(b, "In flight       %d\n", s.Leased)
	fmt.Fprintf(b, "Rates           %.1f accepted/min, %.1f synced/min, %.1f quarantined/min\n",
		s.Rates.AcceptedPerMinute, s.Rates.SyncedPerMinute, s.Rates.QuarantinedPerMinute)
	fmt.Fprintf(b, "Data file       %s, %s, %s free on disk\n", s.DataFile.Path, Bytes(uint64(max(s.DataFile.SizeBytes, 0))), Bytes(s.DataFile.FreeBytes))
}

// renderIntakes writes the table of intakes, when there are any.
func renderIntakes(b *strings.Builder, s *Status) {
	if len(s.Intakes) == 0 {
		return
	}
	b.WriteString("\nIntake      accepted  duplicates  rejected  last received\n")
	for _, in := range s.Intakes {
		fmt.Fprintf(b, "%-11s %8d  %10d  %8d  %s", in.Name, in.Accepted, in.Duplicates, in.Rejected, ago(in.LastReceivedAt, s.GeneratedAt))
		if in.FilesDone+in.FilesRejected+in.FilesSetAside > 0 {
			fmt.Fprintf(b, " (files: %d done, %d rejected", in.FilesDone, in.FilesRejected)
			if in.FilesSetAside > 0 {
				fmt.Fprintf(b, ", %d set aside in the folder: see ASAP_FILE_SET_ASIDE in the log", in.FilesSetAside)
			}
			b.WriteString(")")
		}
		b.WriteString("\n")
	}
}

// renderLedger writes the log and the signing key, when known.
func renderLedger(b *strings.Builder, s *Status) {
	l := s.Ledger
	if l == nil {
		return
	}
	fmt.Fprintf(b, "\nLedger      log %s, sequences %d..%d (%d), signed %d, published %d", l.Log, l.First, l.First+uint64(l.Size)-1, l.Size, l.Signed, l.Published)
	if l.LastCheckpointAt != nil {
		fmt.Fprintf(b, ", last checkpoint %s", ago(l.LastCheckpointAt, s.GeneratedAt))
	}
	b.WriteString("\n")
	if l.PublicKey != "" {
		fmt.Fprintf(b, "Public key  %s\n", l.PublicKey)
	}
	if l.PublicKey != "" && l.LastCheckpointKey != "" && !strings.HasPrefix(l.PublicKey, l.LastCheckpointKey+"+") {
		fmt.Fprintf(b, "Key changed the newest checkpoint was signed with %s, not the key above: the roster needs the line \"%s %s\" (keep the old key's line)\n", l.LastCheckpointKey, s.StoreID, l.PublicKey)
	}
	if l.KeyLostAt != nil {
		fmt.Fprintf(b, "WARNING     the signing key was lost and a new one made %s: add the public key above to the roster\n", ago(l.KeyLostAt, s.GeneratedAt))
	}
	if l.Error != "" {
		fmt.Fprintf(b, "Ledger error  %s\n", l.Error)
	}
}

// renderAttention writes the problems that need attention: s.Judged, or
// else s judged against the plain thresholds for maxAge.
func renderAttention(b *strings.Builder, s *Status, maxAge time.Duration) {
	p := s.Judged
	if p == nil {
		p = s.Judge(PlainThresholds(maxAge))
	}
	if len(p) > 0 {
		b.WriteString("\nNeeds attention:\n")
		for _, line := range p {
			b.WriteString("  - " + line.Message + "\n")
		}
	}
}

func ago(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	return round(now.Sub(*t)).String() + " ago"
}

func round(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Second)
	}
}

// Bytes is a byte count for people: 1.5 GiB, 120.0 MiB, 512 B.
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
