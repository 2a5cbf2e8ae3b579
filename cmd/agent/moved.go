package main

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/internal/cli"
)

// movedCmd is the stub of a head-office command that went to head office's
// binary, rxedge-hq: `agent <use>` is `rxedge-hq <to>`. The old spelling
// stays one release so that a script learns where its command went
// instead of reading "unknown command": the stub links nothing of head
// office, runs nothing, and exits 2 (usage). For a group (subs), the
// subcommand given first is named too when it is one of subs. Nothing
// else of the command line is repeated: it may hold a password.
func movedCmd(use, to string, subs ...string) *cobra.Command {
	return &cobra.Command{
		Use:                use,
		Short:              "moved to rxedge-hq",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			where := to
			if len(args) > 0 && slices.Contains(subs, args[0]) {
				where = strings.TrimSpace(to + " " + args[0])
			} else if len(subs) > 0 {
				where = strings.TrimSpace(to+" …") + " (see `rxedge-hq --help`)"
			}
			return cli.UsageError("moved: `%s` is head office's and went to its own binary: use rxedge-hq %s, with the same flags (package rxedge-hq)",
				cmd.CommandPath(), where)
		},
	}
}
