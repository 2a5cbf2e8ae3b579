package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/configs"
	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/secret"
	"github.com/rxedge/agent/settings"
)

// adminNote ends the help of every command that changes the service.
const adminNote = `Needs root (sudo) on Linux, an elevated prompt (Run as Administrator) on
Windows.`

// newServiceCmds are install, uninstall, start, stop and restart.
func newServiceCmds(s *cli.Streams) []*cobra.Command {
	return []*cobra.Command{
		newInstallCmd(s),
		newUninstallCmd(s),
		newServiceControlCmd(s, "start", "Start the installed service", installer.Start, "started %s; check it with `"+installer.Command()+" status`"),
		newServiceControlCmd(s, "stop", "Stop the service (waits until it has stopped)", installer.Stop, "stopped %s"),
		newServiceControlCmd(s, "restart", "Stop the service and start it again", installer.Restart, "restarted %s; check it with `"+installer.Command()+" status`"),
	}
}

// executable is the binary the service will run: this program, with
// symbolic links resolved so the service does not follow a link someone
// can repoint. Tests replace it, as a test binary lives where no service
// may run it.
var executable = func() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(exe)
}

type installFlags struct {
	configPath string
	user       string
	storeID    string
	dryRun     bool
	msi        bool
	central    centralFlags
	store      storeFlags
}

// centralFlags say how the installed agent reaches central; install writes
// them into a new config.
type centralFlags struct {
	servers      string // --nats, comma-separated
	credsFile    string
	nkeySeedFile string
	user         string
	passwordFile string
	tokenFile    string
	caFile       string
}

// given reports whether any central flag was set.
func (c centralFlags) given() bool { return c != centralFlags{} }

// secrets are the credential files the config will name, whose
// permissions install sets as the config's (the password and token files
// are read into the config instead).
func (c centralFlags) secrets() []string {
	var out []string
	for _, p := range []string{c.credsFile, c.nkeySeedFile} {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// apply writes the central settings into the nats section of a config
// template: nats.servers (empty without --nats: the agent collects
// movements until servers are set, and no placeholder URL is ever
// written), one way to authenticate, and the CA.
func (c centralFlags) apply(tmpl []byte) ([]byte, error) {
	var set [][2]string // keys of the nats section and their values
	switch {
	case c.credsFile != "":
		set = append(set, [2]string{"creds_file", c.credsFile})
	case c.nkeySeedFile != "":
		set = append(set, [2]string{"nkey_seed_file", c.nkeySeedFile})
	case c.user != "":
		pw, err := secret.ReadFile(c.passwordFile)
		if errors.Is(err, secret.ErrEmpty) || errors.Is(err, secret.ErrLines) {
			return nil, cli.UsageError("--password-file: %v", err)
		}
		if err != nil {
			return nil, fmt.Errorf("install: --password-file: %w", err)
		}
		set = append(set, [2]string{"user", c.user}, [2]string{"password", pw})
	case c.tokenFile != "":
		tok, err := secret.ReadFile(c.tokenFile)
		if errors.Is(err, secret.ErrEmpty) || errors.Is(err, secret.ErrLines) {
			return nil, cli.UsageError("--token-file: %v", err)
		}
		if err != nil {
			return nil, fmt.Errorf("install: --token-file: %w", err)
		}
		set = append(set, [2]string{"token", tok})
	}
	if c.caFile != "" {
		set = append(set, [2]string{"ca_file", c.caFile})
	}
	servers := splitList(c.servers)
	t := installer.ParseTemplate(tmpl)
	if err := t.SetList("nats.servers", servers); err != nil {
		return nil, fmt.Errorf("install: could not set nats.servers in the example config (%v)", err)
	}
	for _, kv := range set {
		if err := t.Set("nats."+kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("install: could not set nats.%s in the example config (%v)", kv[0], err)
		}
	}
	b := t.Bytes()
	got, err := installer.ReadConfig(b)
	if err != nil || strings.Join(got.NATS.Servers, ",") != strings.Join(servers, ",") {
		return nil, fmt.Errorf("install: could not set nats.servers in the example config (%v)", err)
	}
	return b, nil
}

// check refuses combinations of central flags that cannot make a valid
// config.
func (c centralFlags) check() error {
	n := 0
	for _, v := range []string{c.credsFile, c.nkeySeedFile, c.user, c.tokenFile} {
		if v != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return cli.UsageError("give one of --creds, --nkey-seed, --token-file or --nats-user with --password-file")
	case (c.user == "") != (c.passwordFile == ""):
		return cli.UsageError("--nats-user and --password-file go together")
	case n > 0 && c.servers == "":
		return cli.UsageError("credentials for central were given without --nats: add --nats nats://central.chain.example:4222 (the chain's servers)")
	}
	for _, f := range []struct{ flag, path string }{{"--creds", c.credsFile}, {"--nkey-seed", c.nkeySeedFile}, {"--password-file", c.passwordFile}, {"--token-file", c.tokenFile}, {"--ca-file", c.caFile}} {
		if f.path != "" && !filepath.IsAbs(f.path) {
			return cli.UsageError("%s %q: give an absolute path (the service does not run in this directory)", f.flag, f.path)
		}
	}
	return nil
}

func newInstallCmd(s *cli.Streams) *cobra.Command {
	var f installFlags
	def := installer.DefaultPaths(runtime.GOOS)
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the agent as a system service (systemd or the Windows service control manager)",
		Long: `Install this binary as the system service ` + installer.ServiceName + `, enabled to start at
boot and restarted 5 s after a failure. Install creates the service account,
the config and data directories with permissions only administrators and the
service have, a fresh ingest token, and the config file (from the example
configuration, with --store-id as store_id) when none exists. An existing
config or token is kept.

--dry-run prints every step, the unit file or service definition and the
config, and changes nothing; it needs no administrator rights.

` + adminNote,
		Example: `  sudo agent install --store-id S0107
  agent install --store-id S0107 --dry-run`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd.Context(), s)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.configPath, "config", "", "config file the service reads (default "+def.ConfigFile+"); written when missing, kept when present")
	fs.StringVar(&f.user, "user", "", "account the service runs as (default "+def.User+")")
	fs.StringVar(&f.storeID, "store-id", "", "this store's id as central knows it, written into a new config (required when the config does not exist yet)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "print what install would do and change nothing (no administrator rights needed)")
	fs.StringVar(&f.central.servers, "nats", "", "central's NATS server URLs, comma-separated, written into a new config (nats.servers)")
	fs.StringVar(&f.central.credsFile, "creds", "", "NATS .creds file for this store (nats.creds_file)")
	fs.StringVar(&f.central.nkeySeedFile, "nkey-seed", "", "NATS NKey seed file for this store (nats.nkey_seed_file)")
	fs.StringVar(&f.central.user, "nats-user", "", "NATS user for this store (nats.user), with --password-file")
	fs.StringVar(&f.central.passwordFile, "password-file", "", "file holding the NATS password (written into the config, readable only by administrators and the service)")
	fs.StringVar(&f.central.tokenFile, "token-file", "", "file holding this store's NATS token (written into the config as nats.token, readable only by administrators and the service)")
	fs.BoolVar(&f.msi, "msi", false, "Windows: the MSI registered the service; prepare the directories, token and config and set the recovery actions without registering it (the MSI runs this)")
	fs.StringVar(&f.central.caFile, "ca-file", "", "CA certificate that signed central's (nats.ca_file)")
	f.store.register(fs)
	return cmd
}

func (f *installFlags) run(ctx context.Context, s *cli.Streams) error {
	if f.storeID != "" && !central.ValidStoreID(f.storeID) {
		return cli.UsageError("--store-id %q: use 1-32 letters, digits, '-' or '_', the store's id as central knows it (e.g. S0107)", f.storeID)
	}
	if err := f.central.check(); err != nil {
		return err
	}
	if err := f.store.check(); err != nil {
		return err
	}
	exe, err := executable()
	if err != nil {
		return fmt.Errorf("install: find the path of this program: %w", err)
	}
	spec := installer.Spec{
		GOOS:            runtime.GOOS,
		Executable:      exe,
		ConfigFile:      f.configPath,
		User:            f.user,
		ConfigTemplate:  configs.AgentExample,
		PackagedUnit:    installer.FindPackagedUnit(),
		PackagedService: f.msi,
	}
	// Prepare only checks what install was asked to do (the flags and where
	// this binary is), so every refusal is a usage error.
	p, err := installer.Prepare(spec)
	if err != nil {
		return &cli.Error{Code: cli.ExitUsage, Msg: err.Error()}
	}
	nc, err := f.newConfig(p.Paths.ConfigFile, s)
	if err != nil {
		return err
	}
	if nc.template, err = f.central.apply(nc.template); err != nil {
		return err
	}
	if nc.template, err = f.store.apply(nc.template); err != nil {
		return err
	}
	spec.ConfigTemplate = nc.template
	spec.Secrets = f.central.secrets()
	if p, err = installer.Prepare(spec); err != nil {
		return &cli.Error{Code: cli.ExitUsage, Msg: err.Error()}
	}
	p.Check = checkConfig
	if f.dryRun {
		// The same checks as install, so a dry run that passes is an
		// install that passes.
		if err := p.CheckDry(); err != nil {
			return err
		}
		if err := p.Render(s.Out); err != nil {
			return err
		}
		fmt.Fprintf(s.Out, "Ingest token: %s\n", tokenPlan(nc, p))
		fmt.Fprintf(s.Out, "Before registering the service, install checks the config as `%s run` does.\n", installer.Command())
		return nil
	}
	if err := installer.Install(ctx, p, s.Out); err != nil {
		return err
	}
	if nc.written && !f.central.given() {
		fmt.Fprintf(s.Out, "nats.servers is empty in %s: the agent collects movements but sends none until you set central's servers and credentials there (or install with --nats and --creds)\n", p.Paths.ConfigFile)
	}
	return nil
}

// tokenPlan says what install does about the ingest token.
func tokenPlan(nc newConfig, p *installer.Plan) string {
	if _, err := os.Stat(p.Token.Path); err == nil {
		return "keeps the existing " + p.Token.Path + "; the service requires it on every ingest request"
	} else if errors.Is(err, fs.ErrPermission) {
		return "keeps " + p.Token.Path + " if it exists (this user cannot look), else writes a new random token there; the service requires it on every ingest request"
	}
	return "writes a new random token to " + p.Token.Path + " (readable by administrators and the service); the service requires it on every ingest request"
}

// checkConfig validates the config at path as `run` does, and refuses one
// that would let the service take movements without a token.
func checkConfig(path string) error {
	c, err := settings.LoadFile(path)
	if err != nil {
		return err
	}
	o, err := c.Validate()
	if err != nil {
		return err
	}
	if o.IngestListen != "" && o.IngestToken == "" {
		return errNoIngestToken(path)
	}
	return nil
}

// errNoIngestToken says exactly which line to add.
func errNoIngestToken(path string) error {
	tf := installer.DefaultPaths(runtime.GOOS).TokenFile
	return fmt.Errorf("%s sets no ingest token, and an installed service always requires one: add the line\n    token_file: %s\nunder `ingest:` in %s (install writes the token there), or set ingest.listen: off", path, tf, path)
}

// newConfig is the config install writes when the service has none.
type newConfig struct {
	template []byte // the example with store_id set
	written  bool   // no config exists, so install writes template
}

// newConfig decides what install does about the config at path. A new
// config gets --store-id as store_id, so no installation ever runs with the
// example's id; an existing config is kept, and --store-id, when given,
// must agree with it.
func (f *installFlags) newConfig(path string, s *cli.Streams) (newConfig, error) {
	example := storeIDOf(configs.AgentExample)
	existing, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if f.storeID == "" {
			return newConfig{}, cli.UsageError("--store-id is required: %s does not exist yet, and install writes it with this store's id as central knows it (e.g. `"+installer.Command()+" install --store-id S0107`)", path)
		}
		tmpl, err := withStoreID(configs.AgentExample, f.storeID)
		return newConfig{template: tmpl, written: true}, err
	case err != nil:
		if f.storeID == "" {
			return newConfig{}, fmt.Errorf("cannot tell whether %s exists: %w; run install as root (sudo) or from an elevated prompt, or pass --store-id for a dry run", path, err)
		}
		fmt.Fprintf(s.Err, "note: cannot read %s (%v): install keeps it if it exists, and otherwise writes it with store_id %s\n", path, err, f.storeID)
		tmpl, err := withStoreID(configs.AgentExample, f.storeID)
		return newConfig{template: tmpl}, err
	}
	if f.central.given() {
		return newConfig{}, cli.UsageError("%s exists and install keeps it, so --nats and the credential flags would be ignored: edit nats in %s, or move it away and install again", path, path)
	}
	if f.store.given() {
		return newConfig{}, cli.UsageError("%s exists and install keeps it, so the intake and operator flags would be ignored: edit intake and remote in %s, or move it away and install again", path, path)
	}
	if c, err := installer.ReadConfig(existing); err == nil && !c.HasTokenSource() {
		return newConfig{}, &cli.Error{Code: cli.ExitError, Msg: errNoIngestToken(path).Error()}
	}
	id := storeIDOf(existing)
	if f.storeID != "" && f.storeID != id {
		return newConfig{}, cli.UsageError("--store-id %s: %s already exists with store_id %q, and install keeps an existing config; edit store_id there, or leave --store-id out", f.storeID, path, id)
	}
	fmt.Fprintf(s.Err, "note: %s exists and is kept (store_id %q); the config in the plan is written only where none exists\n", path, id)
	if id == example {
		fmt.Fprintf(s.Err, "warning: %s has the example's store_id %s; set this store's id there before `"+installer.Command()+" start`\n", path, id)
	}
	tmpl, err := withStoreID(configs.AgentExample, id)
	return newConfig{template: tmpl}, err
}

// storeIDOf reads the top-level store_id of a YAML config ("" when the file
// does not parse or has none).
func storeIDOf(b []byte) string {
	c, err := installer.ReadConfig(b)
	if err != nil {
		return ""
	}
	return c.StoreID
}

// withStoreID returns the config tmpl with its top-level store_id set to id
// (added at the top when tmpl has none), every other line and comment kept
// as it is.
func withStoreID(tmpl []byte, id string) ([]byte, error) {
	t := installer.ParseTemplate(tmpl)
	if err := t.SetFirst("store_id", id); err != nil {
		return nil, fmt.Errorf("install: could not set store_id in the example config (%v)", err)
	}
	out := t.Bytes()
	if got := storeIDOf(out); got != id {
		return nil, fmt.Errorf("install: could not set store_id in the example config (got %q)", got)
	}
	return out, nil
}

func newUninstallCmd(s *cli.Streams) *cobra.Command {
	def := installer.DefaultPaths(runtime.GOOS)
	return &cobra.Command{
		Use:   "uninstall",
		Short: "Stop and remove the system service; keeps the config, the ingest token and the data",
		Long: `Stop the service and remove its definition (the systemd unit, or the
service and its Event Log source on Windows). The config, the ingest token
and the data directory, with every movement not yet synced, are kept and
their paths printed (by default ` + def.ConfigFile + `, ` + def.TokenFile + ` and
` + def.DataDir + `). Install again to pick them up.

` + adminNote,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return installer.Uninstall(cmd.Context(), installer.DefaultPaths(runtime.GOOS), s.Out)
		},
	}
}

// newServiceControlCmd is start, stop or restart: do asks the service
// manager, done (with the service name) is printed after it succeeded.
func newServiceControlCmd(s *cli.Streams, use, short string, do func(context.Context, string) error, done string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short + " (" + installer.ServiceName + ")",
		Long: short + ` (` + installer.ServiceName + `) through systemd or the Windows
service control manager. A stop lets the agent finish in-flight work for up
to ` + installer.StopTimeout.String() + `; acknowledged movements are in the data file either way.

` + adminNote,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			name := installer.ServiceName
			if err := do(cmd.Context(), name); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, done+"\n", name)
			if use == "stop" {
				warnUncleanStop(s, name)
			}
			return nil
		},
	}
}

// warnUncleanStop says so when the stopped agent ended with an error, most
// likely because it missed its stop deadline: systemd then shows the unit
// as failed until the next start.
func warnUncleanStop(s *cli.Streams, name string) {
	if st, err := installer.Status(name); err != nil || st != installer.StateFailed {
		return
	}
	hint := "journalctl -u " + name
	if runtime.GOOS == "windows" {
		hint = "the Application event log, source " + name
	}
	fmt.Fprintf(s.Err, "warning: %s did not stop cleanly (it missed its %s stop deadline or ended with an error; see %s). Acknowledged movements are in the data file; publishes that were in flight are resent, once, after the next start.\n",
		name, installer.StopTimeout, hint)
}
