package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/internal/version"
)

// Version is the `version` command of both binaries: the version, commit,
// build date and Go version (internal/version), --json as an object.
func Version(s *Streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version",
		Args:  NoArgs,
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
