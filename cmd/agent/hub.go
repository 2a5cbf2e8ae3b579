package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/hub"
)

func newHubCmd(s *streams) *cobra.Command {
	var (
		listen     string
		storeDir   string
		confFile   string
		maxPayload int32
	)
	cmd := &cobra.Command{
		Use:   "hub",
		Short: "Run a local central: an embedded NATS server with RX_MOVEMENTS provisioned",
		Long: `Run a local central for a trial or a test: an embedded nats-server with
JetStream on disk under --store-dir (every acknowledged write fsynced) and
the RX_MOVEMENTS stream provisioned. Prints its URL, then runs until
interrupted. For production, run nats-server with configs/nats/ and
` + "`agent provision`" + `.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if storeDir == "" {
				return usageError("hub: --store-dir DIR is required (where JetStream keeps the stream)")
			}
			h, err := hub.Start(hub.Options{Listen: listen, StoreDir: storeDir, ConfigFile: confFile, MaxPayload: maxPayload})
			if err != nil {
				return err
			}
			defer h.Shutdown()
			fmt.Fprintf(s.out, "hub listening on %s (store %s)\n", h.URL(), storeDir)
			for _, c := range h.Provisioned() {
				fmt.Fprintln(s.out, "  "+c)
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

func newProvisionCmd(s *streams) *cobra.Command {
	var (
		nf       natsFlags
		replicas int
		window   time.Duration
		maxAge   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "provision --server URL",
		Short: "Create or update the RX_MOVEMENTS stream on a central server or cluster",
		Long: `Create the RX_MOVEMENTS stream, or bring an existing one to the product's
settings, idempotently, and print what changed. Use the provisioning
identity (the admin user of configs/nats/production.conf.template).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if replicas < 1 || replicas > 5 {
				return usageError("--replicas must be between 1 and 5 (3 for a production cluster)")
			}
			nc, err := nf.connect("rxedge-provision")
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			changes, err := hub.Provision(ctx, js, central.StreamOptions{Replicas: replicas, DuplicateWindow: window, MaxAge: maxAge})
			for _, c := range changes {
				fmt.Fprintln(s.out, c)
			}
			if err != nil {
				return fmt.Errorf("provision: %w", err)
			}
			if len(changes) == 0 {
				fmt.Fprintf(s.out, "%s is up to date\n", central.StreamName)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	nf.register(fs, "")
	fs.IntVar(&replicas, "replicas", central.DefaultReplicas, "stream replicas (3 on a production cluster)")
	fs.DurationVar(&window, "duplicate-window", central.DefaultDuplicateWindow, "Nats-Msg-Id duplicate window")
	fs.DurationVar(&maxAge, "max-age", central.DefaultHorizon, "how long central refuses a second message for a key (the dedupe horizon)")
	return cmd
}
