package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/hub"
)

func newCentralConfigCmd(s *streams) *cobra.Command {
	var roster, out string
	cmd := &cobra.Command{
		Use:   "central-config --roster FILE [-o FILE]",
		Short: "Write the production nats-server configuration for a roster of stores",
		Long: `Write the nats-server configuration of the central for the stores of a
roster (one store id per line; # starts a comment): one account per store,
holding only that store's user and importing only that store's services
from the central account RX (streams, operators, administrator). This is
how configs/nats/production.conf.template is made. Replace its CHANGE-ME
passwords (or switch to NKeys) before use, and run it again when a store
joins or leaves.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if roster == "" {
				return usageError("central-config: --roster FILE is required")
			}
			f, err := os.Open(roster)
			if err != nil {
				return fmt.Errorf("--roster: %w", err)
			}
			stores, err := hub.ReadRoster(f)
			f.Close()
			if err != nil {
				return fmt.Errorf("--roster %s: %w", roster, err)
			}
			var b bytes.Buffer
			if err := hub.CentralConfig(&b, stores); err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err := s.out.Write(b.Bytes())
				return err
			}
			if err := os.WriteFile(out, b.Bytes(), 0o600); err != nil {
				return err
			}
			fmt.Fprintf(s.err, "wrote %s: %d store account(s)\n", out, len(stores))
			return nil
		},
	}
	cmd.Flags().StringVar(&roster, "roster", "", "file of store ids, one a line")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write here instead of standard output (mode 0600)")
	return cmd
}
