package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/doctor"
	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/secret"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
)

// doctorLong is the command's help.
const doctorLong = `Check everything a store needs, and say how to fix what is wrong: the
config is valid; the config and token are private; the ingest token is set;
central is reachable and accepts the store's credentials; the stream is
there (and, with --admin-user, has central's settings); the store may
publish on its own subjects and not on another store's; the clock agrees
with central's (visible with --admin-user); there is disk space; the
oldest pending movement is recent; and the store's signing key (ledger.key_file)
is there (or is made at the first start of a new data file), is the store's own,
is readable by the service's account and nobody else, and signed the newest
checkpoint (if not, it prints the roster line the new key needs).

Whether central fsyncs every write and replicates its streams is head
office's check: rxedge-hq durability, with central's system user.

Doctor changes nothing: its publish probes are refused by the stream by
design and store nothing. Run it as an administrator (it reads the config).
Exit status 0 when the store is ready, 3 when any check fails (a warning
or a skipped check does not).`

func newDoctorCmd(s *cli.Streams) *cobra.Command {
	var (
		dev       bool
		devHub    string
		loc       location
		asJSON    bool
		adminUser string
		adminPass string
		moved     movedFlags
		timeout   time.Duration
		maxAge    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check whether this store is ready (exit 0 ready, 3 not ready)",
		Long:  doctorLong,
		Example: `  sudo rxedge-agent doctor
  sudo rxedge-agent doctor --json --admin-user admin --admin-password-file /root/admin.pw`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := moved.check(cmd); err != nil {
				return err
			}
			c, path, err := loc.loadConfig()
			if dev {
				c, err = devDoctorConfig(cmd.Context(), devHub, loc.dataDir, timeout)
				path = ""
			}
			if err == nil && path == "" && !dev {
				err = fmt.Errorf("no config: %s does not exist", defaultConfigPath())
			}
			if err != nil {
				// Not ready either: say so in the report's form.
				r := doctor.Report{Checks: []doctor.Check{{Name: doctor.CheckConfig, Detail: err.Error(),
					Fix: "run doctor as an administrator (sudo) on an installed store, or pass --config FILE"}}}
				return printDoctor(s, r, asJSON)
			}
			o := doctor.Options{ConfigPath: path, Config: c, Timeout: timeout, MaxPendingAge: maxAge, Command: installer.Command(), Trial: dev}
			if adminUser != "" {
				pw, err := secret.ReadFile(adminPass)
				if err != nil {
					return cli.UsageError("--admin-user needs --admin-password-file: %v", err)
				}
				o.Admin = &doctor.Admin{User: adminUser, Password: pw}
			}
			if c.DataDir != "" {
				keyFile := ""
				if dataDir, err := filepath.Abs(c.DataDir); err == nil {
					if ls, problems := c.Ledger.Validate("ledger", dataDir); len(problems) == 0 {
						keyFile = ls.KeyFile
					}
				}
				o.Status = func(ctx context.Context) (*status.Status, error) { return readStatus(ctx, c.DataDir, keyFile) }
			}
			return printDoctor(s, doctor.Run(cmd.Context(), o), asJSON)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&dev, "dev", false, "check the trial agent of run --dev (data in ./"+settings.DevBase+"/agent or --data-dir DIR/agent, central its embedded hub, the intakes it last started with)")
	fs.StringVar(&devHub, "dev-hub", settings.DevHubListen, "with --dev: the trial hub's address")
	loc.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&adminUser, "admin-user", "", "central's administrator (may read the stream's info): compare the stream's settings and the clock")
	fs.StringVar(&adminPass, "admin-password-file", "", "file holding --admin-user's password")
	moved.register(fs)
	fs.DurationVar(&timeout, "timeout", 5*time.Second, "limit of each network step")
	fs.DurationVar(&maxAge, "max-age", time.Hour, "oldest pending movement that passes")
	return cmd
}

// devDoctorConfig is the configuration of the trial agent `run --dev`
// runs with its hub at devHub and its data under base (DevBase when ""),
// with the intakes it last started with: its journal's newest start
// record names them, flags and variables of that start included, so
// `doctor --dev` checks the HL7 listener and the drop folder the trial
// has, as doctor does with a settings file.
func devDoctorConfig(ctx context.Context, devHub, base string, timeout time.Duration) (settings.Config, error) {
	c, err := settings.DevConfig(devHub)
	if err != nil {
		return c, err
	}
	if base != "" {
		abs, err := filepath.Abs(base)
		if err != nil {
			return c, err
		}
		c.DataDir = filepath.Join(abs, "agent")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	trialIntakes(ctx, &c)
	return c, nil
}

// trialIntakes sets c's intakes to those of the newest start record in
// the journal of c.DataDir's agent, when there is one to read.
func trialIntakes(ctx context.Context, c *settings.Config) {
	if _, err := os.Stat(settings.DataFile(c.DataDir)); err != nil {
		return
	}
	conn, err := connect(ctx, c.DataDir, readOnly, "")
	if err != nil {
		return
	}
	defer conn.Close()
	res, err := conn.Audit(ctx, dlq.AuditFilter{Actions: []string{queue.ActionStart}})
	if err != nil || len(res.Events) == 0 {
		return
	}
	d := res.Events[len(res.Events)-1].Detail
	c.Intake.HL7.Listen = d["hl7_listen"]
	if h := d["hl7_allowed"]; h != "" {
		c.Intake.HL7.AllowedHosts = strings.Split(h, ",")
	}
	c.Intake.ASAP.Dir = filepath.FromSlash(d["asap_dir"])
	c.Intake.Formulary = filepath.FromSlash(d["formulary"])
}

// movedFlags are the flags of the durability check doctor had: still
// accepted, so that a script using them learns where the check went
// instead of reading "unknown flag".
type movedFlags struct {
	sysUser, sysPass string
	monitor          []string
}

func (m *movedFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&m.sysUser, "system-user", "", "moved to rxedge-hq durability")
	fs.StringVar(&m.sysPass, "system-password-file", "", "moved to rxedge-hq durability")
	fs.StringSliceVar(&m.monitor, "monitor-url", nil, "moved to rxedge-hq durability")
	for _, n := range []string{"system-user", "system-password-file", "monitor-url"} {
		_ = fs.MarkHidden(n)
	}
}

// check refuses the moved flags with a usage error that says where the
// check went.
func (m *movedFlags) check(cmd *cobra.Command) error {
	for _, n := range []string{"system-user", "system-password-file", "monitor-url"} {
		if cmd.Flags().Changed(n) {
			return cli.UsageError("doctor --%s: moved: central's fsync and replicas are head office's check: run `rxedge-hq durability --server URL --user sys` (or --monitor-url) there", n)
		}
	}
	return nil
}

// printDoctor writes the report and returns exit status 3 unless ready.
func printDoctor(s *cli.Streams, r doctor.Report, asJSON bool) error {
	if asJSON {
		if err := cli.PrintJSON(s.Out, r); err != nil {
			return err
		}
	} else {
		for _, ch := range r.Checks {
			mark := "ok  "
			switch {
			case ch.OK:
			case ch.Skipped:
				mark = "skip"
			case ch.Warning:
				mark = "warn"
			default:
				mark = "FAIL"
			}
			fmt.Fprintf(s.Out, "%s %-33s %s\n", mark, ch.Name, ch.Detail)
			if !ch.OK && ch.Fix != "" {
				fmt.Fprintf(s.Out, "     %-33s fix: %s\n", "", ch.Fix)
			}
		}
		if r.Ready {
			fmt.Fprintln(s.Out, "ready")
		} else {
			fmt.Fprintln(s.Out, "not ready")
		}
	}
	if !r.Ready {
		return &cli.Error{Code: cli.ExitAttention}
	}
	return nil
}
