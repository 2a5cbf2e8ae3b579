package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/config"
	"github.com/rxedge/agent/daemon"
)

type runFlags struct {
	location
	storeID  string
	ingest   string
	nats     string
	logLevel string
}

func newRunCmd(s *streams) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent in the foreground (what the system service runs)",
		Long: `Run the agent in the foreground until SIGINT or SIGTERM.

On a signal it stops accepting submissions (503), finishes the commits in
flight, lets publishes in flight finish briefly, and closes the data file.
Flags win over RXEDGE_* environment variables, which win over the file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.options()
			if err != nil {
				return err
			}
			log := newLogger(s, opts.LogLevel)
			return daemon.Run(cmd.Context(), opts, log, daemon.Hooks{})
		},
	}
	fs := cmd.Flags()
	f.register(fs)
	fs.StringVar(&f.storeID, "store-id", "", "this store's id (store_id)")
	fs.StringVar(&f.ingest, "ingest", "", `ingest listener address host:port, or "off" (ingest.listen)`)
	fs.StringVar(&f.nats, "nats", "", "central NATS server URLs, comma-separated (nats.servers)")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error (log.level)")
	return cmd
}

// options merges file, environment and flags, and validates.
func (f *runFlags) options() (config.Options, error) {
	c, path, err := f.loadConfig()
	if err != nil {
		return config.Options{}, err
	}
	f.apply(&c)
	o, err := c.Validate()
	if err != nil && path == "" {
		return o, fmt.Errorf("%w\n(no configuration file was read: %s does not exist; start from configs/agent.example.yaml and pass --config FILE, or try `agent run --dev`)", err, defaultConfigPath())
	}
	return o, err
}

func (f *runFlags) apply(c *config.Config) {
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

// newLogger logs JSON lines on stderr (journald and service logs take
// them as they are).
func newLogger(s *streams, level string) *slog.Logger {
	var l slog.Level
	l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(s.err, &slog.HandlerOptions{Level: l}))
}
