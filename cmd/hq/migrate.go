package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/migrate"
	"github.com/rxedge/agent/headoffice/natsconn"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/progress"
)

// newMigrateCmd is `hq migrate`: move a one-partition central's movements
// into its partitions.
func newMigrateCmd(s *cli.Streams) *cobra.Command {
	var (
		nf         natsconn.Flags
		partitions int
		from       string
		inFlight   int
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "migrate --server URL --partitions N [--from RX_MOVEMENTS]",
		Short: "Copy a one-partition central's movements into N partitions, each key once",
		Long: `Copy every movement of the old stream (--from, RX_MOVEMENTS) into its
store's partition of a central with N partitions, whose movement streams and
archives must exist already (hq provision --partitions N). Each movement
is republished with its own Nats-Msg-Id and Rx-* headers and "no message
yet" expected on its subject, so a partition refuses a key it holds; the
copy there is then read back: the same digest counts as already migrated,
another is a conflict, reported and never overwritten. Running it again
migrates nothing twice. Use central's administrator identity. docs/headoffice.md,
"Moving to a partitioned central", gives the whole procedure.

Exit status 0 when every movement is in its partition, 3 when a conflict
needs someone, 1 when some movements could not be copied this time (run it
again).`,
		Example: `  hq migrate --server nats://central:4222 --user admin --partitions 4
  hq migrate --server nats://central:4222 --user admin --partitions 4 --json`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if partitions < 2 || partitions > central.MaxPartitions {
				return cli.UsageError("--partitions must be between 2 and %d", central.MaxPartitions)
			}
			nc, err := nf.Connect("rxedge-migrate")
			if err != nil {
				return err
			}
			defer nc.Close()
			var bar *progress.Bar
			o := migrate.Options{From: from, Partitions: partitions, InFlight: inFlight, Timeout: nf.Timeout}
			if !asJSON {
				o.Progress = func(done, total uint64) {
					if bar == nil {
						bar = progress.New(s.Err, "migrate", "movements", int(total))
					}
					bar.Add(1)
				}
			}
			sum, err := migrate.Run(cmd.Context(), nc, o)
			bar.Done()
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(s.Out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(sum); err != nil {
					return err
				}
			} else {
				printMigration(s, sum)
			}
			switch {
			case len(sum.Failures) > 0:
				return &cli.Error{Code: cli.ExitError, Msg: fmt.Sprintf("%d movement(s) not copied this time: run the migration again", len(sum.Failures))}
			case len(sum.Conflicts) > 0:
				return &cli.Error{Code: cli.ExitAttention, Msg: fmt.Sprintf("%d conflict(s): the partition holds another movement under the key; nothing was overwritten", len(sum.Conflicts))}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	nf.Register(fs, "")
	fs.IntVar(&partitions, "partitions", 0, "number of partitions of the new central (required, at least 2)")
	fs.StringVar(&from, "from", central.StreamName, "the one-partition stream to copy from")
	fs.IntVar(&inFlight, "in-flight", migrate.DefaultInFlight, "publishes awaiting central's acknowledgement at once")
	fs.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	return cmd
}

func printMigration(s *cli.Streams, sum *migrate.Summary) {
	fmt.Fprintf(s.Out, "%s -> %d partitions: read %d of %d, migrated %d, already migrated %d, skipped %d (not movements), %d conflict(s), %d failure(s)\n",
		sum.From, sum.Partitions, sum.Read, sum.Total, sum.Migrated, sum.Already, sum.Skipped, len(sum.Conflicts), len(sum.Failures))
	for p, n := range sum.PerPartition {
		fmt.Fprintf(s.Out, "  %s: %d\n", central.MovementStream(p, sum.Partitions), n)
	}
	fmt.Fprintf(s.Out, "%.1fs, %.0f records/s\n", sum.Seconds, sum.RecordsPerSecond)
	for _, c := range sum.Conflicts {
		fmt.Fprintf(s.Out, "conflict: store %s key %s: %s sequence %d has another digest than %s sequence %d\n",
			c.Store, c.Key, c.Stream, c.PartitionSeq, sum.From, c.OldSeq)
	}
	for _, f := range sum.Failures {
		fmt.Fprintf(s.Out, "not copied: store %s key %s (%s sequence %d): %s\n", f.Store, f.Key, sum.From, f.OldSeq, f.Reason)
	}
}
