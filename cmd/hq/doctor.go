package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/headoffice/service"
	"github.com/rxedge/agent/internal/cli"
)

const doctorLong = `Check what hq run --config needs, without running it:

  roster           it parses, and every store has its ledger key
  witness key      readable, mode 0600, a signer key that the settings'
                   public key (when given) verifies
  postgres         reachable with the settings' URL and password
  postgres grants  the sink's user has configs/postgres/sink-grants.sql's
                   grants (a user that may also change movements warns)
  nats.<identity>  each identity the jobs use connects; the audit identity
                   reads the archives; none may publish on the stores'
                   subjects

Each failed check says its fix. Nothing it prints holds a secret.

Exit status: 0 ready; 3 not ready (a check failed); 2 usage (a settings
problem); 1 error.`

func newDoctorCmd(s *cli.Streams) *cobra.Command {
	var config string
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "doctor --config hq.yaml [--json]",
		Short: "Check hq run's settings, keys, roster, PostgreSQL grants and NATS grants",
		Long:  doctorLong,
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" {
				return cli.UsageError("--config hq.yaml is required (see configs/hq.yaml)")
			}
			set, err := service.LoadSettings(config)
			if err != nil {
				return cli.UsageError("%v", err)
			}
			if err := set.Check(config, os.Getenv); err != nil {
				return cli.UsageError("%v", err)
			}
			rep := service.Doctor(cmd.Context(), set, os.Getenv, timeout)
			if asJSON {
				if err := cli.PrintJSON(s.Out, rep); err != nil {
					return err
				}
			} else {
				for _, c := range rep.Checks {
					mark := "ok  "
					switch {
					case c.Warning:
						mark = "warn"
					case !c.OK:
						mark = "FAIL"
					}
					fmt.Fprintf(s.Out, "%s %s: %s\n", mark, c.Name, c.Detail)
					if !c.OK && c.Fix != "" {
						fmt.Fprintf(s.Out, "     fix: %s\n", c.Fix)
					}
				}
			}
			if !rep.Ready {
				return &cli.Error{Code: cli.ExitAttention, Msg: "not ready: fix the failed checks above"}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&config, "config", "", "hq run's settings file (configs/hq.yaml)")
	fs.BoolVar(&asJSON, "json", false, "print the checks as JSON")
	fs.DurationVar(&timeout, "timeout", service.DefaultDoctorTimeout, "bound on each connection and question")
	return cmd
}
