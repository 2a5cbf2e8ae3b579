package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/daemon"
	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/logging"
	"github.com/rxedge/agent/settings"
)

type runFlags struct {
	location
	storeID   string
	ingest    string
	nats      string
	logLevel  string
	logFormat string
	dev       bool
	devHub    string
	hl7Listen string
	asapDir   string
	formulary string
}

func newRunCmd(s *cli.Streams) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent in the foreground (what the system service runs)",
		Long: `Run the agent in the foreground until SIGINT or SIGTERM, or until the
service manager (systemd, the Windows service control manager) stops it.

On a stop it refuses new submissions (503), finishes the commits in flight,
lets publishes in flight finish briefly, and closes the data file, within
` + installer.StopTimeout.String() + `; it then exits 0. A second SIGINT or SIGTERM ends it at once
(acknowledged movements are committed already). It exits 1 when it misses
that deadline, and when it stops on its own (the service manager then
restarts it).
Flags win over RXEDGE_* environment variables, which win over the file.

--formulary FILE is the intakes' formulary (intake.formulary,
RXEDGE_INTAKE_FORMULARY): a CSV of ndc,schedule or ndc,schedule,unit
rows (configs/formulary.example.csv). Every intake checks movements
against it; the ASAP drop folder (--asap-dir) needs it, since an ASAP
record carries no DEA schedule.`,
		Args:        cli.NoArgs,
		Annotations: map[string]string{ownSignals: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.dev {
				return f.runDev(s)
			}
			opts, files, err := f.options()
			if err != nil {
				return err
			}
			if err := serviceNeedsToken(installer.UnderServiceManager(), opts); err != nil {
				return err
			}
			return serve(s, opts, func(ctx context.Context, log *slog.Logger) error {
				for _, p := range installer.ReadableByOthers(files...) {
					log.Warn("READABLE_BY_OTHERS", "path", p, "fix", installer.PrivateFix(p))
				}
				for _, w := range opts.Warnings {
					log.Warn("DEPRECATED_SETTING", "warning", w)
				}
				return daemon.Run(ctx, opts, log, daemon.Hooks{})
			})
		},
	}
	fs := cmd.Flags()
	f.register(fs)
	fs.StringVar(&f.storeID, "store-id", "", "this store's id (store_id)")
	fs.StringVar(&f.ingest, "ingest", "", `ingest listener address host:port, or "off" (ingest.listen)`)
	fs.StringVar(&f.nats, "nats", "", "central NATS server URLs, comma-separated (nats.servers)")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error (log.level)")
	fs.StringVar(&f.logFormat, "log-format", "", "json or text (log.format)")
	fs.StringVar(&f.hl7Listen, "hl7-listen", "", `HL7 v2 MLLP listener address host:port, or "off" (intake.hl7.listen)`)
	fs.StringVar(&f.asapDir, "asap-dir", "", "ASAP 4.2 drop folder (intake.asap.dir); needs a formulary")
	fs.StringVar(&f.formulary, "formulary", "", "the intakes' formulary, a CSV of ndc,schedule[,unit] rows (intake.formulary)")
	fs.BoolVar(&f.dev, "dev", false, "trial mode: also run a local central (embedded hub) in this process; data under ./rxedge-dev unless --data-dir")
	fs.StringVar(&f.devHub, "dev-hub", settings.DevHubListen, "with --dev: the embedded hub's address")
	return cmd
}

// options merges file, environment and flags, and validates. It also
// returns the secret-bearing files it read: the config and the token file.
func (f *runFlags) options() (settings.Options, []string, error) {
	c, path, err := f.loadConfig()
	if err != nil {
		return settings.Options{}, nil, err
	}
	f.apply(&c)
	if err := f.checkIntake(c); err != nil {
		return settings.Options{}, nil, err
	}
	var files []string
	for _, p := range []string{path, c.Ingest.TokenFile} {
		if p != "" {
			files = append(files, p)
		}
	}
	o, err := c.Validate()
	if err != nil && path == "" {
		return o, nil, fmt.Errorf("%w\n(no configuration file was read: %s does not exist; start from configs/agent.example.yaml and pass --config FILE, or try `agent run --dev`)", err, defaultConfigPath())
	}
	return o, files, err
}

// serviceNeedsToken refuses to run as a service whose ingest listener takes
// movements without a token (DESIGN P7: an installed service always
// requires its token).
func serviceNeedsToken(service bool, o settings.Options) error {
	if !service || o.IngestListen == "" || o.IngestToken != "" {
		return nil
	}
	return fmt.Errorf("the service's ingest listener %s has no token: add `token_file: %s` under `ingest:` in the config (`%s install` writes that file), or set ingest.listen: off",
		o.IngestListen, installer.DefaultPaths(runtime.GOOS).TokenFile, installer.Command())
}

func (f *runFlags) apply(c *settings.Config) {
	if f.storeID != "" {
		c.StoreID = f.storeID
	}
	if f.ingest != "" {
		c.Ingest.Listen = f.ingest
	}
	if f.nats != "" {
		c.NATS.Servers = splitList(f.nats)
	}
	if f.logLevel != "" {
		c.Log.Level = f.logLevel
	}
	if f.logFormat != "" {
		c.Log.Format = f.logFormat
	}
	if f.hl7Listen != "" {
		c.Intake.HL7.Listen = f.hl7Listen
	}
	if f.asapDir != "" {
		c.Intake.ASAP.Dir = f.asapDir
	}
	if f.formulary != "" {
		c.Intake.Formulary = f.formulary
	}
}

// checkIntake says, in the words of the flags, what the intake flags
// given lack: a drop folder without a formulary, or a --formulary that
// cannot be read. The configuration's validation says it again in the
// settings' words for a file or the environment.
func (f *runFlags) checkIntake(c settings.Config) error {
	if f.asapDir != "" && c.Intake.Formulary == "" {
		return cli.UsageError("--asap-dir needs --formulary FILE (or intake.formulary, %s): an ASAP record carries no DEA schedule, so each NDC's schedule comes from the formulary",
			settings.EnvName("intake.formulary"))
	}
	if f.formulary == "" {
		return nil
	}
	if _, err := intake.LoadFormulary(f.formulary); err != nil {
		return fmt.Errorf("--formulary: cannot read the formulary: %w; give a CSV of ndc,schedule[,unit] rows (configs/formulary.example.csv)", err)
	}
	return nil
}

// runDev runs the agent and a local central in one process: the README's
// first command. Defaults: store DEV0001, data in ./rxedge-dev.
func (f *runFlags) runDev(s *cli.Streams) error {
	c, err := f.devConfig()
	if err != nil {
		return err
	}
	f.apply(&c)
	if err := f.checkIntake(c); err != nil {
		return err
	}
	if c.StoreID == "" {
		c.StoreID = "DEV0001"
	}
	if c.DataDir == "" {
		c.DataDir = "rxedge-dev"
	}
	if c.Sync.ResumeJitter == 0 {
		c.Sync.ResumeJitter = time.Second
	}
	base, err := filepath.Abs(c.DataDir)
	if err != nil {
		return err
	}
	c.DataDir = filepath.Join(base, "agent")
	if len(c.NATS.Servers) > 0 {
		return cli.UsageError("--dev runs its own central: leave out --nats / nats.servers")
	}
	h, err := startDevHub(f.devHub, filepath.Join(base, "hub"))
	if errors.Is(err, errNoDevHub) {
		return err
	}
	if err != nil {
		return fmt.Errorf("dev hub: %w%s", err, daemon.InUseHint(err, fmt.Sprintf("another hub or nats-server listens on %s: stop it, or give the trial's hub another address with --dev-hub 127.0.0.1:4223", f.devHub)))
	}
	defer h.Shutdown()
	c.NATS.Servers = []string{h.URL()}
	opts, err := c.Validate()
	if err != nil {
		return err
	}
	// The daemon calls Ready, then HL7Ready, before it serves: the banner
	// waits for both addresses.
	var ingestAddr string
	hooks := daemon.Hooks{
		Ready:    func(addr string) { ingestAddr = addr },
		HL7Ready: func(addr string) { printDev(s, f.devHub, h.URL(), opts, ingestAddr, addr) },
	}
	return serve(s, opts, func(ctx context.Context, log *slog.Logger) error {
		return daemon.Run(ctx, opts, log, hooks)
	})
}

// devConfig is the configuration of a trial run. The trial never picks up
// an installed service's config: only a --config given here is read.
func (f *runFlags) devConfig() (settings.Config, error) {
	if f.configPath != "" {
		c, _, err := f.loadConfig()
		return c, err
	}
	var c settings.Config
	if err := c.ApplyEnv(os.LookupEnv); err != nil {
		return c, err
	}
	if f.dataDir != "" {
		c.DataDir = f.dataDir
	}
	return c, nil
}

// printDev greets the trial user with the addresses, the intakes when
// configured, and first commands written as this agent was started, so
// they run as printed.
func printDev(s *cli.Streams, devHub, hubURL string, opts settings.Options, addr, hl7Addr string) {
	cmd := invocation(os.Args[0], exec.LookPath)
	fmt.Fprintf(s.Out, "RxEdge agent (trial mode) for store %s\n", opts.StoreID)
	fmt.Fprintf(s.Out, "  central (embedded hub):  %s\n", hubURL)
	if addr != "" {
		fmt.Fprintf(s.Out, "  ingest:                  http://%s%s\n", addr, control.IngestPath)
	}
	if hl7Addr != "" {
		fmt.Fprintf(s.Out, "  HL7 v2 (MLLP):           %s\n", hl7Addr)
	}
	if dir := opts.Intake.ASAP.Dir; dir != "" {
		fmt.Fprintf(s.Out, "  ASAP drop folder:        %s\n", dir)
	}
	if f := opts.Intake.Formulary; f != "" {
		fmt.Fprintf(s.Out, "  formulary:               %s\n", f)
	}
	fmt.Fprintf(s.Out, "  data:                    %s\nTry:\n", opts.DataDir)
	if addr != "" {
		fmt.Fprintf(s.Out, "  curl -s -XPOST http://%s%s -H 'Content-Type: application/json' -d '{\"movement_id\":\"demo-1\",\"type\":\"dispense\",\"ndc\":\"12345-6789-01\",\"quantity\":1,\"unit\":\"EA\",\"occurred_at\":\"%s\"}'\n",
			addr, control.IngestPath, time.Now().UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(s.Out, "  %s status --data-dir %s\n", cmd, shellQuote(opts.DataDir))
	doctor := cmd + " doctor --dev --data-dir " + shellQuote(filepath.Dir(opts.DataDir))
	if devHub != settings.DevHubListen {
		doctor += " --dev-hub " + devHub
	}
	fmt.Fprintf(s.Out, "  %s\n", doctor)
	fmt.Fprintln(s.Out, "Ctrl-C stops it; the data stays.")
}

// invocation is how a user runs this agent again, from arg0 (os.Args[0]):
// `go run ./cmd/agent` for a binary `go run` built in its temporary
// directory; the name alone for one found on the PATH; else the path as
// given (./agent, /opt/rxedge/rxedge-agent), quoted for a shell when it
// needs it.
func invocation(arg0 string, lookPath func(string) (string, error)) string {
	dir := filepath.Dir(arg0)
	if filepath.Base(dir) == "exe" && strings.Contains(filepath.ToSlash(dir), "/go-build") {
		return "go run ./cmd/agent"
	}
	if !strings.ContainsAny(arg0, `/\`) {
		return arg0
	}
	name := filepath.Base(arg0)
	if found, err := lookPath(name); err == nil {
		a, errA := os.Stat(arg0)
		b, errB := os.Stat(found)
		if errA == nil && errB == nil && os.SameFile(a, b) {
			return name
		}
	}
	return shellQuote(arg0)
}

// shellQuote is s as a shell takes it as one word: as it is when it holds
// only letters, digits and the punctuation of paths; else in single quotes
// (POSIX) or double quotes (Windows, whose paths hold no '"').
func shellQuote(s string) string {
	plain := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-:+=,@"
	if runtime.GOOS == "windows" {
		plain += `\`
		if s != "" && strings.Trim(s, plain) == "" {
			return s
		}
		return `"` + s + `"`
	}
	if s != "" && strings.Trim(s, plain) == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// serve runs the agent until it is asked to stop, the same way from a
// terminal and under systemd or the Windows service control manager (see
// installer.Run). It logs JSON or text lines on stderr; when stderr is
// journald's stream each line starts with its syslog priority, so the
// journal records the level; as a Windows service, start, stop, warnings
// and errors also go to the Application event log at their level.
func serve(s *cli.Streams, opts settings.Options, run func(ctx context.Context, log *slog.Logger) error) error {
	var l slog.Level
	l.UnmarshalText([]byte(opts.LogLevel))
	f, isFile := s.Err.(*os.File)
	base := logging.New(s.Err, logging.Options{Format: opts.LogFormat, Level: l, Journal: isFile && logging.IsJournal(f)})
	h, closer, err := installer.EventLogHandler(installer.ServiceName, base)
	log := slog.New(h)
	if err != nil {
		log.Warn("EVENT_LOG_UNAVAILABLE", "error", err.Error())
	}
	defer closer.Close()
	var runErr error
	err = installer.Run(installer.ServiceName, func(ctx context.Context) error {
		runErr = run(ctx, log)
		return runErr
	}, installer.StopTimeout, log)
	if errors.Is(err, installer.ErrExitedEarly) && runErr != nil {
		// The agent stopped on its own, e.g. it could not start: its own
		// error says what to do.
		return runErr
	}
	return err
}
