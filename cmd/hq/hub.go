package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/headoffice/natsconn"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/secret"
)

func newHubCmd(s *cli.Streams) *cobra.Command {
	var (
		listen     string
		storeDir   string
		confFile   string
		maxPayload int32
	)
	cmd := &cobra.Command{
		Use:   "hub",
		Short: "Run a local central: an embedded NATS server with central's streams provisioned",
		Long: `Run a local central for a trial or a test: an embedded nats-server with
JetStream on disk under --store-dir (every acknowledged write fsynced) and
central's streams provisioned: one partition, the movement stream
RX_MOVEMENTS with its archive RX_ARCHIVE, and the fleet view KV_RX_FLEET.
Prints its URL, then runs until interrupted. For production, run nats-server with configs/nats/ and
` + "`hq provision`" + `.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if storeDir == "" {
				return cli.UsageError("hub: --store-dir DIR is required (where JetStream keeps the stream)")
			}
			h, err := hub.Start(hub.Options{Listen: listen, StoreDir: storeDir, ConfigFile: confFile, MaxPayload: maxPayload, Provision: streams.Provision})
			if err != nil {
				return err
			}
			defer h.Shutdown()
			fmt.Fprintf(s.Out, "hub listening on %s (store %s)\n", h.URL(), storeDir)
			for _, c := range h.Provisioned() {
				fmt.Fprintln(s.Out, "  "+c)
			}
			<-cmd.Context().Done()
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", "", "client address host:port (default "+hub.DefaultListen+", or the --server-config file's)")
	fs.StringVar(&storeDir, "store-dir", "", "JetStream directory (required)")
	fs.StringVar(&confFile, "server-config", "", "optional nats-server configuration file without authorization (e.g. configs/nats/hub-dev.conf)")
	fs.Int32Var(&maxPayload, "max-payload", 0, "largest message the server accepts, in bytes (0: server default)")
	return cmd
}

// provisionLong is the help of `hq provision`.
const provisionLong = `Create central's streams, or bring existing ones to the product's settings,
idempotently, and print what changed: for each of --partitions partitions a
movement stream (RX_MOVEMENTS, or RX_MOVEMENTS_<p>), which refuses a second
message for a key for the dedupe horizon (--max-age), and its archive
(RX_ARCHIVE, or RX_ARCHIVE_<p>), which copies every movement and keeps it
for --retention; then the fleet view KV_RX_FLEET, and the witness stream
RX_WITNESS, kept as long as the archives. The partitions must be those of
the server configuration (hq central-config --partitions).

--retention is 2y (761 days: two years and a month, the DEA's record
period, 21 CFR 1304.04; the default) or 6y (2,223 days: six years and a
month, DSCSA's period for the transaction information of what a store
receives). A longer retention is applied to existing archives at once; a
shorter one is not, since the server would delete every record older at
once: provision keeps the longer max_age and says so, unless
--lower-retention is given.

A movement stream's max_age is never lowered before its archive has copied
it: provision then keeps the old max_age, says so, and lowers it when run
again after the archive has caught up. Use the provisioning identity (the
admin user of configs/nats/production.conf.template).

Then, with --system-user or --monitor-url, it checks that every server
fsyncs each write (sync_interval: always) and that the streams have three
replicas on a cluster (as hq durability does), and exits 3 when
central can lose acknowledged movements; without them it says the check
was not run.`

// provisionFlags are provision's flags.
type provisionFlags struct {
	nf               natsconn.Flags
	stream           central.StreamOptions
	retention        string
	shortOK          bool
	sysUser, sysPass string
	monitor          []string
}

func newProvisionCmd(s *cli.Streams) *cobra.Command {
	var f provisionFlags
	cmd := &cobra.Command{
		Use:   "provision --server URL [--partitions N] [--replicas N] [--retention 2y|6y [--lower-retention]]",
		Short: "Create or update central's streams on a central server or cluster",
		Long:  provisionLong,
		Args:  cli.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return f.run(cmd.Context(), s) },
	}
	fs := cmd.Flags()
	f.nf.Register(fs, "")
	fs.IntVar(&f.stream.Partitions, "partitions", 1, fmt.Sprintf("partitions of central, 1 to %d, as in the server configuration", central.MaxPartitions))
	fs.IntVar(&f.stream.Replicas, "replicas", central.DefaultReplicas, "stream replicas (3 on a production cluster)")
	fs.DurationVar(&f.stream.DuplicateWindow, "duplicate-window", central.DefaultDuplicateWindow, "Nats-Msg-Id duplicate window")
	fs.DurationVar(&f.stream.MaxAge, "max-age", central.DefaultHorizon, "how long central refuses a second message for a key (the dedupe horizon)")
	fs.StringVar(&f.retention, "retention", "2y", "how long the archives and the witness stream keep every record: 2y (761 days) or 6y (2,223 days)")
	fs.BoolVar(&f.stream.LowerRetention, "lower-retention", false, "lower an existing archive's max_age to --retention (deletes every record older at once)")
	fs.BoolVar(&f.shortOK, "allow-short-retention", false, "accept a --retention duration under two years (test centrals only)")
	_ = fs.MarkHidden("allow-short-retention")
	fs.StringVar(&f.sysUser, "system-user", "", "a user of central's system account: then check fsync and replicas")
	fs.StringVar(&f.sysPass, "system-password-file", "", "file holding --system-user's password")
	fs.StringSliceVar(&f.monitor, "monitor-url", nil, "central's monitoring URL, one per server (instead of --system-user)")
	return cmd
}

// parseRetention reads --retention: 2y or 6y, or with
// --allow-short-retention (a test central) any duration.
func parseRetention(v string, shortOK bool) (time.Duration, error) {
	switch v {
	case "2y":
		return central.DefaultRetention, nil
	case "6y":
		return central.SixYearRetention, nil
	}
	if d, err := time.ParseDuration(v); err == nil && shortOK {
		return d, nil
	}
	return 0, cli.UsageError("--retention %q: give 2y (761 days, the DEA's two years and a month) or 6y (2,223 days, DSCSA's six years and a month)", v)
}

func (f *provisionFlags) run(ctx context.Context, s *cli.Streams) error {
	var err error
	if f.stream.Retention, err = parseRetention(f.retention, f.shortOK); err != nil {
		return err
	}
	if err := streams.CheckOptions(f.stream, f.shortOK); err != nil {
		return cli.UsageError("%v", err)
	}
	dnf := &f.nf // who checks durability: the system user when given
	if f.sysUser != "" {
		pw, err := secret.ReadFile(f.sysPass)
		if err != nil {
			return cli.UsageError("--system-user needs --system-password-file: %v", err)
		}
		dnf = f.nf.AsUser(f.sysUser, pw)
	}
	nc, err := f.nf.Connect("rxedge-provision")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(f.stream.Partitions)*5*time.Second)
	defer cancel()
	changes, err := streams.Provision(pctx, js, f.stream)
	for _, c := range changes {
		fmt.Fprintln(s.Out, c)
	}
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	if len(changes) == 0 {
		fmt.Fprintln(s.Out, "central's streams are up to date")
	}
	if f.sysUser == "" && len(f.monitor) == 0 {
		fmt.Fprintln(s.Out, "durability not checked: give --system-user and --system-password-file, or --monitor-url, to check fsync and replicas")
		return nil
	}
	r, err := checkDurability(ctx, dnf, f.monitor)
	if err != nil {
		return fmt.Errorf("provisioned, but the durability check failed: %w", err)
	}
	return printDurability(s, r, false)
}
