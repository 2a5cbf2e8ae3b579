package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/headoffice/durability"
	"github.com/rxedge/agent/headoffice/natsconn"
	"github.com/rxedge/agent/internal/cli"
)

// newDurabilityCmd is `hq durability`: does central fsync every write and
// replicate its movement streams and archives?
func newDurabilityCmd(s *cli.Streams) *cobra.Command {
	var (
		nf      natsconn.Flags
		monitor []string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "durability (--server URL --user sys | --monitor-url URL...)",
		Short: "Check that central fsyncs every write and replicates the movement streams and archives",
		Long: `Ask every central server, as a user of its system account
($SYS.REQ.SERVER.PING.JSZ) or on its monitoring endpoints (/varz, /jsz, one
--monitor-url per server), whether JetStream runs with sync_interval:
always, and whether the movement streams and archives have three replicas
on a cluster. Each finding that needs a change comes with a one-line fix.
A single server with one replica is a warning: fine for a trial, not for
production. Changes nothing.

Exit status 0 when nothing needs fixing (warnings are printed), 3 when a
server or a stream can lose acknowledged movements.`,
		Example: `  NATS_PASSWORD=... hq durability --server nats://central-1:4222 --user sys
  hq durability --monitor-url http://central-1:8222,http://central-2:8222,http://central-3:8222`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := checkDurability(cmd.Context(), &nf, monitor)
			if err != nil {
				return err
			}
			return printDurability(s, r, asJSON)
		},
	}
	fs := cmd.Flags()
	nf.Register(fs, "")
	fs.StringSliceVar(&monitor, "monitor-url", nil, "monitoring URL of each server, instead of a system account user")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// checkDurability reads central's durability over the monitoring URLs when
// given, else over a connection with nf (a system account user).
func checkDurability(ctx context.Context, nf *natsconn.Flags, monitor []string) (durability.Report, error) {
	if len(monitor) > 0 {
		return durability.FromMonitor(ctx, nil, monitor, nf.Timeout)
	}
	nc, err := nf.Connect("rxedge-durability")
	if err != nil {
		return durability.Report{}, err
	}
	defer nc.Close()
	return durability.FromSystem(ctx, nc, nf.Timeout)
}

// printDurability writes the report and returns exit status 3 when a
// finding is an error.
func printDurability(s *cli.Streams, r durability.Report, asJSON bool) error {
	if asJSON {
		if err := cli.PrintJSON(s.Out, r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(s.Out, "central durability (from %s): %d server(s), cluster of %d\n", r.Source, len(r.Servers), r.ClusterSize)
		for _, f := range r.Findings {
			mark := map[durability.Severity]string{durability.OK: "ok  ", durability.Warning: "warn", durability.Error: "FAIL"}[f.Severity]
			what := "server " + f.Server
			switch {
			case f.Stream != "":
				what = "stream " + f.Stream
			case f.Server == "":
				what = "cluster"
			}
			fmt.Fprintf(s.Out, "%s %-24s %s\n", mark, what, f.Detail)
			if f.Fix != "" {
				fmt.Fprintf(s.Out, "     %-24s fix: %s\n", "", f.Fix)
			}
		}
	}
	if r.Worst() == durability.Error {
		return &cli.Error{Code: cli.ExitAttention}
	}
	return nil
}
