package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/status"
)

// statusLong is the help of `agent …`.
const statusLong = `Show the agent's state: connection to central, counts per state and class,
the oldest pending movement, the last sync and error, recent rates, and the
data file.

Works while the agent runs (through its control socket) and while it is
stopped (reading the data file). Exit status 3 when movements are
quarantined, the oldest pending movement is older than --max-age, sync is
paused because central cannot take anything, central refuses the agent
(credentials, permissions, TLS, no stream, no JetStream), the agent cannot
reach central and has never delivered a movement, or the installed service
is stopped. An outage of a store that delivered before is not a reason:
its movements wait. With --json the document lists these as "problems", each with a
stable code.

--check follows the Nagios/Icinga plugin contract instead: one line
"RXEDGE OK|WARNING|CRITICAL|UNKNOWN - ... | perfdata" and exit 0, 1, 2 or 3,
judged by the --warn-* and --crit-* thresholds (0 turns one off). An agent
that does not run is CRITICAL; a status that cannot be read is UNKNOWN.`

func newStatusCmd(s *cli.Streams) *cobra.Command {
	var (
		loc      location
		asJSON   bool
		watch    bool
		check    bool
		interval time.Duration
		maxAge   time.Duration
		th       = defaultCheckThresholds()
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the agent's state, counts and health (exit 3 when it needs attention)",
		Long:  statusLong,
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if check {
				return runCheck(cmd.Context(), s, &loc, th)
			}
			dataDir, err := loc.resolveDataDir()
			if err != nil {
				return err
			}
			// The problems --json and the plain view list are judged by
			// the same thresholds as --check, so a state has one severity
			// whichever asks; only what --check alone judges (an agent
			// that does not run, time offline, free disk) is left out.
			plain := th
			plain.PendingAgeWarn = maxAge
			plain.DisconnectedWarn, plain.DisconnectedCrit, plain.FreeDiskWarn, plain.FreeDiskCrit = 0, 0, 0, 0
			plain.RequireRunning = false
			keyFile := loc.ledgerKeyFile(dataDir)
			if watch {
				return watchStatus(cmd.Context(), s, dataDir, keyFile, interval, plain, asJSON)
			}
			return statusOnce(cmd.Context(), s, dataDir, keyFile, plain, maxAge, asJSON)
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print the status document as JSON (with --watch: one document per line per refresh)")
	fs.BoolVar(&watch, "watch", false, "refresh the view until interrupted")
	fs.DurationVar(&interval, "interval", 2*time.Second, "refresh interval for --watch")
	fs.DurationVar(&maxAge, "max-age", time.Hour, "pending age above which the exit status is 3")
	fs.BoolVar(&check, "check", false, "monitoring plugin mode: one line with performance data; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN")
	fs.DurationVar(&th.PendingAgeWarn, "warn-pending-age", th.PendingAgeWarn, "--check: WARNING when the oldest pending movement is older")
	fs.DurationVar(&th.PendingAgeCrit, "crit-pending-age", th.PendingAgeCrit, "--check: CRITICAL when the oldest pending movement is older")
	fs.Uint64Var(&th.QuarantinedWarn, "warn-quarantined", th.QuarantinedWarn, "--check: WARNING at this many quarantined movements")
	fs.Uint64Var(&th.QuarantinedCrit, "crit-quarantined", th.QuarantinedCrit, "--check: CRITICAL at this many quarantined movements")
	fs.DurationVar(&th.DisconnectedWarn, "warn-disconnected", th.DisconnectedWarn, "--check: WARNING when offline longer")
	fs.DurationVar(&th.DisconnectedCrit, "crit-disconnected", th.DisconnectedCrit, "--check: CRITICAL when offline longer")
	fs.Var((*byteSize)(&th.FreeDiskWarn), "warn-free-disk", "--check: WARNING when the data directory's disk has less free (e.g. 1GiB, 500MB)")
	fs.Var((*byteSize)(&th.FreeDiskCrit), "crit-free-disk", "--check: CRITICAL when the data directory's disk has less free")
	return cmd
}

// statusOnce prints the status document of dataDir once, judged by th,
// as the plain view or JSON; it exits 3 when the document has problems,
// 1 when there is no data file yet.
func statusOnce(ctx context.Context, s *cli.Streams, dataDir, keyFile string, th status.Thresholds, maxAge time.Duration, asJSON bool) error {
	st, err := readStatus(ctx, dataDir, keyFile)
	if errors.Is(err, errNoDataFile) {
		// Installed but never started: the service state is part of
		// the answer. An error (exit 1), as for every command that
		// finds no data file.
		svc := serviceState()
		msg := fmt.Sprintf("service: %s\n%v; after install, start it with `%s start`", svc, err, installer.Command())
		if asJSON {
			cli.PrintJSON(s.Out, map[string]any{"error": err.Error(), "service": svc})
		}
		return &cli.Error{Code: cli.ExitError, Msg: msg}
	}
	if err != nil {
		return err
	}
	st.Judged = st.Judge(th)
	if asJSON {
		enc := json.NewEncoder(s.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else {
		status.Render(s.Out, st, maxAge)
	}
	if len(st.Judged) > 0 {
		return &cli.Error{Code: cli.ExitAttention}
	}
	return nil
}

// defaultCheckThresholds are the defaults of the --check flags.
func defaultCheckThresholds() status.Thresholds {
	return status.Thresholds{
		PendingAgeWarn: time.Hour, PendingAgeCrit: 4 * time.Hour,
		QuarantinedWarn: 1, QuarantinedCrit: 100,
		DisconnectedWarn: 15 * time.Minute, DisconnectedCrit: time.Hour,
		FreeDiskWarn: 1 << 30, FreeDiskCrit: 256 << 20,
		RequireRunning: true,
	}
}

// checkUsage turns a usage error of `status --check` into the plugin
// contract's UNKNOWN (exit 3, one line on stdout): a monitoring system
// reads exit 2 as CRITICAL.
func checkUsage(args []string, stdout io.Writer, err error) error {
	var e *cli.Error
	if !errors.As(err, &e) || e.Plugin || e.Code != cli.ExitUsage || len(args) == 0 || args[0] != "status" {
		return err
	}
	for _, a := range args[1:] {
		if a == "--check" || strings.HasPrefix(a, "--check=") && a != "--check=false" {
			fmt.Fprintln(stdout, "RXEDGE UNKNOWN - usage: "+strings.ReplaceAll(strings.ReplaceAll(e.Msg, "\n", " "), "|", "/"))
			return &cli.Error{Code: status.CheckUnknown, Msg: e.Msg, Plugin: true}
		}
	}
	return err
}

// runCheck is `status --check`: whatever goes wrong, the answer is one
// line and a plugin exit code.
func runCheck(ctx context.Context, s *cli.Streams, loc *location, th status.Thresholds) error {
	var st *status.Status
	dataDir, err := loc.resolveDataDir()
	if err == nil {
		st, err = readStatus(ctx, dataDir, loc.ledgerKeyFile(dataDir))
	}
	code, line := status.Check(st, err, th)
	fmt.Fprintln(s.Out, line)
	if code == status.CheckOK {
		return nil
	}
	return &cli.Error{Code: code, Plugin: true}
}

// byteSize is a flag holding a number of bytes, written with an optional
// unit: 512, 500MB, 1GiB.
type byteSize uint64

func (b *byteSize) String() string { return status.Bytes(uint64(*b)) }
func (b *byteSize) Type() string   { return "size" }

func (b *byteSize) Set(s string) error {
	units := []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := strings.TrimSpace(s), uint64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return fmt.Errorf("%q is not a size such as 500MB or 1GiB", s)
	}
	*b = byteSize(f * float64(mult))
	return nil
}

// isServiceDataDir says whether a data directory is the installed
// service's; tests point it elsewhere.
var isServiceDataDir = installer.IsServiceDataDir

// readStatus reads the status of the agent of dataDir, whose signing key
// is keyFile ("" for the default place in dataDir).
func readStatus(ctx context.Context, dataDir, keyFile string) (*status.Status, error) {
	conn, err := connect(ctx, dataDir, readOnly, "")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	st, err := conn.Status(ctx)
	if err != nil {
		return nil, err
	}
	if !conn.running && st.Ledger != nil {
		if keyFile == "" {
			keyFile = filepath.Join(dataDir, notary.KeyFileName)
		}
		stoppedLedgerKey(st.Ledger, keyFile, st.StoreID)
	}
	// The system service is part of the answer only for the data
	// directory it runs on: a trial (run --dev) or another directory gets
	// no line about a service it never was.
	if isServiceDataDir(dataDir) {
		st.Service = serviceState()
	}
	return st, nil
}

// stoppedLedgerKey fills in the public key of a stopped agent from its key
// file, as the running agent shows the key it signs with; a key file that
// cannot be read is said in l.Error, as the running agent says it. Only
// the public key is ever taken from the file.
func stoppedLedgerKey(l *status.Ledger, keyFile, store string) {
	k, err := notary.LoadKey(keyFile, store)
	signed := l.Signed > 0 || l.LastCheckpointAt != nil
	switch {
	case err == nil:
		l.PublicKey = k.VKey
	case errors.Is(err, notary.ErrNoKey) && !signed:
		l.Error = fmt.Sprintf("no signing key at %s yet: the agent makes one at its start; its public key then goes into the roster", keyFile)
	case errors.Is(err, notary.ErrNoKey):
		l.Error = fmt.Sprintf("the signing key file %s is missing: restore it from a backup before the agent starts, or the agent makes a new key (a lost key) whose public key must go into the roster", keyFile)
	case errors.Is(err, fs.ErrPermission):
		l.Error = fmt.Sprintf("cannot read the signing key %s: permission denied: run status as an administrator (sudo) or as the agent's user to see its public key", keyFile)
	default:
		l.Error = err.Error()
	}
}

// ledgerKeyFile is the signing key file of the agent of dataDir: the
// configuration's ledger.key_file when the configuration is that agent's,
// else the default place in dataDir.
func (l *location) ledgerKeyFile(dataDir string) string {
	def := filepath.Join(dataDir, notary.KeyFileName)
	own := *l
	own.dataDir = ""
	c, _, err := own.loadConfig()
	if err != nil || c.DataDir == "" {
		return def
	}
	if d, err := filepath.Abs(c.DataDir); err != nil || filepath.Clean(d) != filepath.Clean(dataDir) {
		return def
	}
	ls, problems := c.Ledger.Validate("ledger", dataDir)
	if len(problems) > 0 {
		return def
	}
	return ls.KeyFile
}

// serviceState is the state of the system service: running, stopped,
// failed, not-installed, or unknown with the reason when the service
// manager cannot be asked (no systemd, no rights).
func serviceState() *status.Service {
	st, err := installer.Status(installer.ServiceName)
	if err != nil {
		return &status.Service{State: status.ServiceUnknown, Detail: err.Error()}
	}
	switch st {
	case installer.StateRunning:
		return &status.Service{State: status.ServiceRunning}
	case installer.StateStopped:
		return &status.Service{State: status.ServiceStopped}
	case installer.StateFailed:
		return &status.Service{State: status.ServiceFailed}
	case installer.StateNotInstalled:
		return &status.Service{State: status.ServiceNotInstalled}
	}
	return &status.Service{State: status.ServiceUnknown}
}

// isTerminal reports whether w is a terminal, where the watch view may
// clear the screen.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// watchStatus refreshes the status every interval until ctx ends. On a
// terminal it redraws the screen; into a pipe it writes one view (or one
// JSON document per line) per refresh, with no escape codes.
func watchStatus(ctx context.Context, s *cli.Streams, dataDir, keyFile string, interval time.Duration, th status.Thresholds, asJSON bool) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	tty := isTerminal(s.Out)
	for {
		var b strings.Builder
		st, err := readStatus(ctx, dataDir, keyFile)
		if st != nil {
			st.Judged = st.Judge(th)
		}
		switch {
		case asJSON && err != nil:
			json.NewEncoder(&b).Encode(map[string]string{"error": err.Error(), "generated_at": time.Now().UTC().Format(time.RFC3339Nano)})
		case asJSON:
			json.NewEncoder(&b).Encode(st)
		default:
			if tty {
				b.WriteString("\x1b[H\x1b[2J") // home, clear
			} else {
				b.WriteString("\n")
			}
			if err != nil {
				fmt.Fprintf(&b, "agent: %v\n", err)
			} else {
				status.Render(&b, st, th.PendingAgeWarn)
			}
			if tty {
				fmt.Fprintf(&b, "\n(refreshing every %s; Ctrl-C to stop)\n", interval)
			}
		}
		fmt.Fprint(s.Out, b.String())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			// A tick and the end can both be ready: the end wins, or the
			// view would end with a spurious error of a cancelled read.
			if ctx.Err() != nil {
				return nil
			}
		}
	}
}
