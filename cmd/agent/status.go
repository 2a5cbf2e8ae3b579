package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/status"
)

func newStatusCmd(s *streams) *cobra.Command {
	var (
		loc      location
		asJSON   bool
		watch    bool
		interval time.Duration
		maxAge   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the agent's state, counts and health (exit 3 when it needs attention)",
		Long: `Show the agent's state: connection to central, counts per state and class,
the oldest pending movement, the last sync and error, recent rates, and the
data file.

Works while the agent runs (through its control socket) and while it is
stopped (reading the data file). Exit status 3 when movements are
quarantined, the oldest pending movement is older than --max-age, sync
is paused because central cannot take anything, central refuses the
agent (credentials, permissions, TLS, no stream, no JetStream), or the
agent cannot reach central and has never delivered a movement, so
monitoring systems (Nagios, Zabbix, ...) can run it. An outage of a store
that delivered before is not a reason: its movements wait.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dataDir, err := loc.resolveDataDir()
			if err != nil {
				return err
			}
			if watch {
				return watchStatus(cmd.Context(), s, dataDir, interval, maxAge)
			}
			st, err := readStatus(cmd.Context(), dataDir)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(s.out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(st); err != nil {
					return err
				}
			} else {
				status.Render(s.out, st, maxAge)
			}
			if p := st.Problems(maxAge); len(p) > 0 || st.CentralAttention() != "" {
				return &exitErr{code: exitAttention}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print the status document as JSON")
	fs.BoolVar(&watch, "watch", false, "refresh the view until interrupted")
	fs.DurationVar(&interval, "interval", 2*time.Second, "refresh interval for --watch")
	fs.DurationVar(&maxAge, "max-age", time.Hour, "pending age above which the exit status is 3")
	return cmd
}

func readStatus(ctx context.Context, dataDir string) (*status.Status, error) {
	conn, err := connect(ctx, dataDir, readOnly, "")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	st, err := conn.Status(ctx)
	if err != nil {
		return nil, err
	}
	st.Service = serviceState()
	return st, nil
}

// serviceState is the state of the system service as `agent status` shows
// it: "running", "stopped", "failed", "not installed", or "unknown (why)"
// when the service manager cannot be asked (no systemd, no rights).
func serviceState() string {
	st, err := installer.Status(installer.ServiceName)
	if err != nil {
		return fmt.Sprintf("%s (%v)", installer.StateUnknown, err)
	}
	return string(st)
}

func watchStatus(ctx context.Context, s *streams, dataDir string, interval, maxAge time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var b strings.Builder
		b.WriteString("\x1b[H\x1b[2J") // home, clear
		st, err := readStatus(ctx, dataDir)
		if err != nil {
			fmt.Fprintf(&b, "agent: %v\n", err)
		} else {
			status.Render(&b, st, maxAge)
		}
		fmt.Fprintf(&b, "\n(refreshing every %s; Ctrl-C to stop)\n", interval)
		fmt.Fprint(s.out, b.String())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
