package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/internal/cli"
)

func newCentralConfigCmd(s *cli.Streams) *cobra.Command {
	var (
		roster, out string
		partitions  int
	)
	cmd := &cobra.Command{
		Use:   "central-config --roster FILE [--partitions N] [-o FILE]",
		Short: "Write the production nats-server configuration for a roster of stores",
		Long: `Write the nats-server configuration of the central for the stores of a
roster (one store id per line; # starts a comment): one account per store,
holding only that store's user and importing only that store's services
from the central account RX (streams, operators, administrator, auditor).
This is how configs/nats/production.conf.template is made. Replace its
CHANGE-ME passwords (or switch to NKeys) before use, and run it again when
a store joins or leaves.

With --partitions N the central holds movements in N movement streams and
N archives, each store in the partition nats-server's partition(N) function
gives its id; the store's account maps the subjects its agent uses, which
do not change, onto its partition's. Provision the same number
(hq provision --partitions N). Changing N later moves stores to other
partitions, whose movement streams do not hold their earlier keys.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if partitions < 1 || partitions > central.MaxPartitions {
				return cli.UsageError("--partitions must be between 1 and %d", central.MaxPartitions)
			}
			if roster == "" {
				return cli.UsageError("central-config: --roster FILE is required")
			}
			stores, err := provision.ReadRosterFile(roster)
			if err != nil {
				return err
			}
			var b bytes.Buffer
			if err := provision.CentralConfig(&b, stores, partitions); err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err := s.Out.Write(b.Bytes())
				return err
			}
			if err := os.WriteFile(out, b.Bytes(), 0o600); err != nil {
				return err
			}
			fmt.Fprintf(s.Err, "wrote %s: %d store account(s)\n", out, len(stores))
			return nil
		},
	}
	cmd.Flags().StringVar(&roster, "roster", "", "file of store ids, one a line")
	cmd.Flags().IntVar(&partitions, "partitions", 1, fmt.Sprintf("partitions of central, 1 to %d", central.MaxPartitions))
	cmd.Flags().StringVarP(&out, "output", "o", "", "write here instead of standard output (mode 0600)")
	return cmd
}
