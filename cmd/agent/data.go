package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/settings"
)

func newDataCmd(s *cli.Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Decide about a data file the agent refused to start over",
		Long: `The agent does not start on an empty data file over a leftover: a
missing data file with agent.db.compact beside it, a data directory whose
marker (agent.db.id) names a file that is gone, or a data file that is not
the one the marker names. It refuses with a message naming what it found;
an operator decides with one of these commands (the agent stopped). Both
are recorded in the audit journal with who and why, and neither deletes
anything: a file set aside is renamed to <name>.discarded-<UTC time>.`,
		Args: cli.NoArgs,
	}
	cmd.AddCommand(newDataDecideCmd(s, "adopt", "Keep the leftover as the data file",
		`Keep what the agent refused to start over: the compaction's leftover
becomes the data file (a data file in its place is set aside), or the data
file the marker does not name is accepted as this directory's.`, lineage.Adopt),
		newDataDecideCmd(s, "discard", "Set the leftover aside and start a new data file",
			`Set aside what the agent refused to start over and start a new data
file. The new file continues after central's record of the store, so no
store sequence is reused; what the set-aside file held and never reached
central is reported by head office's reconciliation as lost with the old
file's identity.`, lineage.Discard))
	return cmd
}

func newDataDecideCmd(s *cli.Streams, name, short, long string, decide func(path, store, actor, reason string) (lineage.Decision, error)) *cobra.Command {
	var (
		loc           location
		reason, store string
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   name + " --reason TEXT",
		Short: short,
		Long:  long,
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(reason) == "" {
				return cli.UsageError("%s: --reason TEXT is required (it is recorded in the audit journal)", name)
			}
			dataDir, err := loc.resolveDataDir()
			if err != nil {
				return err
			}
			if store == "" {
				if c, _, err := loc.loadConfig(); err == nil {
					store = c.StoreID
				}
			}
			if store == "" {
				return cli.UsageError("%s: the store id is not configured: pass --store-id or --config", name)
			}
			pctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
			running := control.Dial(control.Endpoint(dataDir)).Ping(pctx) == nil
			cancel()
			if running {
				return fmt.Errorf("the agent is running for %s: stop it first", dataDir)
			}
			d, err := decide(settings.DataFile(dataDir), store, control.LocalActor(), reason)
			if err != nil {
				return err
			}
			if asJSON {
				return cli.PrintJSON(s.Out, d)
			}
			fmt.Fprintf(s.Out, "%s: data file %s is file %s (last sequence %d)\n", name, d.Path, d.FileID, d.LastSeq)
			if d.Adopted != "" {
				fmt.Fprintf(s.Out, "  adopted %s\n", d.Adopted)
			}
			for _, a := range d.SetAside {
				fmt.Fprintf(s.Out, "  set aside as %s\n", a)
			}
			fmt.Fprintln(s.Out, "recorded in the audit journal; start the agent")
			return nil
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	fs.StringVar(&reason, "reason", "", "why (recorded in the audit journal; required)")
	fs.StringVar(&store, "store-id", "", "store id (default: from the configuration)")
	fs.BoolVar(&asJSON, "json", false, "print the decision as JSON")
	return cmd
}
