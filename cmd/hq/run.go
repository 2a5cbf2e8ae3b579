package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/headoffice/service"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/internal/cli"
)

const runLong = `Run head office's service: the jobs of --config's sections, each
continuously, under one supervisor.

  sink       follows the archives into PostgreSQL (hq sink)
  witness    countersigns the stores' checkpoints (hq witness)
  verify     verifies the stores' logs incrementally, its state and
             findings in PostgreSQL (tables verify_state, verify_findings)
  reconcile  reconciles the archive with the stores, every interval
  fleet      watches the fleet: silent, paused, quarantining stores,
             restored or replaced data files, lineage holds, each a
             problem that opens once and closes once
  console    the head-office console, on its own listener

A job that fails is reported and started again after a backoff; it never
stops the others. Each job that writes takes a lease first (a PostgreSQL
advisory lock): a second hq run against the same database waits as a
standby, and takes a job over when the first lets go of it.

/metrics, /readyz and /healthz are served on listen (default
127.0.0.1:9467). /readyz is 200 once every job has completed a first
pass, or is retrying, or waits as a standby; 503 while one is in its
first pass. SIGTERM ends each job after what it has in flight (the sink's
transaction, verification's record of a pass), within stop_timeout.

--dev runs a development hub (or uses --server) without PostgreSQL: the
fleet watch and the console, in its development mode on loopback
(--console-listen, default 127.0.0.1:7480), whose one-time login link is
printed.

Exit status: 0 stopped; 1 error; 2 usage (a settings problem).`

func newRunCmd(s *cli.Streams) *cobra.Command {
	var config, server, operatorKey, storeDir, consoleListen string
	var dev bool
	cmd := &cobra.Command{
		Use:   "run --config hq.yaml | run --dev [--server URL] [--operator-key FILE] [--console-listen ADDR]",
		Short: "Run head office's service: sink, witness, verification, reconciliation, fleet watch and console",
		Long:  runLong,
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewJSONHandler(s.Err, nil))
			var set service.Settings
			switch {
			case dev && config != "":
				return cli.UsageError("give --config or --dev, not both")
			case dev:
				var stop func()
				var err error
				if set, stop, err = devSettings(server, operatorKey, storeDir, consoleListen); err != nil {
					return err
				}
				defer stop()
			case config == "":
				return cli.UsageError("--config hq.yaml is required (see configs/hq.yaml), or --dev")
			default:
				var err error
				if set, err = service.LoadSettings(config); err != nil {
					return cli.UsageError("%v", err)
				}
				if err := set.Check(config, os.Getenv); err != nil {
					return cli.UsageError("%v", err)
				}
			}
			svc, err := service.Open(set, os.Getenv, log, dev)
			if err != nil {
				return err
			}
			defer svc.Close()
			return svc.Run(cmd.Context(), func(addr string) {
				log.Info("HQ_STARTED", "listen", addr, "console", svc.ConsoleAddr())
				if dev && svc.Console != nil {
					fmt.Fprintf(s.Out, "console: %s\n", svc.Console.LoginURL(svc.ConsoleListener().Addr()))
				}
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&config, "config", "", "the service's settings file (configs/hq.yaml)")
	fs.BoolVar(&dev, "dev", false, "development mode: a local hub, no PostgreSQL, the console on loopback")
	fs.StringVar(&server, "server", "", "with --dev: use this NATS server instead of a local hub")
	fs.StringVar(&operatorKey, "operator-key", "", "with --dev: the operator key file the console signs commands with (hq keys operator)")
	fs.StringVar(&storeDir, "store-dir", "", "with --dev: the local hub's JetStream directory (default a temporary one)")
	fs.StringVar(&consoleListen, "console-listen", console.DefaultListen, "with --dev: the console's address, on loopback (port 0: any free one)")
	return cmd
}

// devSettings are the settings of hq run --dev: the fleet watch and the
// console on loopback (consoleListen), against server or a local hub it
// starts.
func devSettings(server, operatorKey, storeDir, consoleListen string) (service.Settings, func(), error) {
	var set service.Settings
	stop := func() {}
	if host, _, err := net.SplitHostPort(consoleListen); err != nil || !net.ParseIP(host).IsLoopback() {
		return set, stop, cli.UsageError("--console-listen %q: the development console listens on loopback only (127.0.0.1:PORT)", consoleListen)
	}
	if server == "" {
		if storeDir == "" {
			d, err := os.MkdirTemp("", "rxedge-hq-dev-")
			if err != nil {
				return set, stop, err
			}
			storeDir = d
			stop = func() { os.RemoveAll(d) }
		}
		h, err := hub.Start(hub.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Clean(storeDir), Provision: streams.Provision})
		if err != nil {
			stop()
			return set, func() {}, err
		}
		rm := stop
		stop = func() { h.Shutdown(); rm() }
		server = h.URL()
	}
	off := false
	set.NATS.Servers, set.NATS.Partitions = server, 1
	set.NATS.OperatorKey.File = operatorKey
	set.Sink.Enabled, set.Witness.Enabled, set.Verify.Enabled, set.Reconcile.Enabled = &off, &off, &off, &off
	set.Listen = "127.0.0.1:0"
	set.Console = &console.Settings{Listen: consoleListen, Auth: console.AuthDev}
	if err := set.Check("--dev", func(string) string { return "" }); err != nil {
		stop()
		return set, func() {}, err
	}
	set.StateDir = os.TempDir()
	return set, stop, nil
}
