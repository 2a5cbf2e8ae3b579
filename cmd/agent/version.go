package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/version"
)

func newVersionCmd(s *cli.Streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the agent's version, commit, build date and Go version",
		Args:  cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := version.Get()
			if asJSON {
				return json.NewEncoder(s.Out).Encode(v)
			}
			_, err := fmt.Fprintln(s.Out, v.String())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
