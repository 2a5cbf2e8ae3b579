package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
)

func newRoot(s *cli.Streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "agent",
		Short: "RxEdge edge agent: durable local queue of pharmacy inventory movements, synced exactly once to central",
		Long: `RxEdge edge agent.

The agent stores every inventory movement it acknowledges in a local data file
(fsynced before it answers), then delivers it exactly once to central storage
(a NATS JetStream stream), pausing while offline. Movements that cannot be
delivered wait in a local quarantine for an operator.

Head office's commands (provision, sink, verify, reconcile, remote, ...)
are in its own binary, rxedge-hq.`,
	}
	root.AddCommand(
		newRunCmd(s),
		newEnqueueCmd(s),
		newStatusCmd(s),
		newDoctorCmd(s),
		newDLQCmd(s),
		newAuditCmd(s),
		newCompactCmd(s),
		newDataCmd(s),
		newLedgerCmd(s),
		cli.Version(s),
	)
	root.AddCommand(newServiceCmds(s)...)
	for _, name := range []string{"provision", "central-config", "hub", "verify-proof"} {
		root.AddCommand(movedCmd(name, name))
	}
	root.AddCommand(
		movedCmd("central", "", "reconcile", "migrate", "durability", "sink", "report", "verify", "prove", "witness", "witness-key"),
		movedCmd("remote", "remote", "status", "list", "redrive"),
	)
	return cli.Root(root)
}

// location are the flags that say which agent a command talks to.
type location struct {
	configPath string
	dataDir    string
}

func (l *location) register(fs *pflag.FlagSet) {
	fs.StringVar(&l.configPath, "config", "", "agent configuration file (default "+defaultConfigPath()+" when it exists)")
	fs.StringVar(&l.dataDir, "data-dir", "", "the agent's data directory (default: data_dir of the configuration; env RXEDGE_DATA_DIR)")
}

// defaultConfigPath is where the installed service reads its configuration.
// Tests point it elsewhere.
var defaultConfigPath = func() string { return installer.DefaultPaths(runtime.GOOS).ConfigFile }

// loadConfig reads the configuration: the file given by --config, or the
// default file when it exists, then RXEDGE_* variables and --data-dir. It
// says which file it read ("" for none).
func (l *location) loadConfig() (settings.Config, string, error) {
	var c settings.Config
	path := l.configPath
	if path == "" && defaultConfigExists(os.Stat) {
		path = defaultConfigPath()
	}
	if path != "" {
		if f, err := os.Open(path); errors.Is(err, os.ErrPermission) {
			return c, path, fmt.Errorf("cannot read the configuration %s: permission denied: run the command as an administrator (sudo), or pass --data-dir", path)
		} else if err == nil {
			f.Close()
		}
	}
	if path != "" {
		var err error
		if c, err = settings.LoadFile(path); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return c, path, fmt.Errorf("configuration file %s does not exist: copy configs/agent.example.yaml there and edit it, or pass --config", path)
			}
			return c, path, err
		}
	}
	if err := c.ApplyEnv(os.LookupEnv); err != nil {
		return c, path, err
	}
	if l.dataDir != "" {
		c.DataDir = l.dataDir
	}
	return c, path, nil
}

// defaultConfigExists reports whether the installed config is there. A
// config in a directory the caller may not read (/etc/rxedge is 0750) is
// there too: the caller then gets "permission denied: run it as an
// administrator" from loadConfig, not "which agent?".
func defaultConfigExists(stat func(string) (os.FileInfo, error)) bool {
	_, err := stat(defaultConfigPath())
	return err == nil || errors.Is(err, os.ErrPermission)
}

// errNoDataFile: the agent has not run for this data directory yet.
var errNoDataFile = errors.New("no agent data file")

// resolveDataDir finds the data directory of the agent a command talks to.
func (l *location) resolveDataDir() (string, error) {
	if l.dataDir != "" {
		return filepath.Abs(l.dataDir)
	}
	c, _, err := l.loadConfig()
	if err != nil {
		return "", err
	}
	if c.DataDir == "" {
		return "", cli.UsageError("which agent? pass --data-dir DIR or --config FILE (or set RXEDGE_DATA_DIR)")
	}
	return filepath.Abs(c.DataDir)
}

// openMode says how a command that finds the agent stopped opens the file.
type openMode int

const (
	readOnly openMode = iota
	readWrite
)

// agentConn is the local API of one agent: over its control socket when it
// runs, or in-process over its data file when it does not.
type agentConn struct {
	*control.Client
	running bool
	dataDir string
	q       *queue.Queue // set when the file was opened here
}

func (a *agentConn) Close() error {
	a.Client.CloseIdleConnections()
	if a.q != nil {
		return a.q.Close()
	}
	return nil
}

// connect reaches the agent of dataDir. storeID is needed only to create a
// new data file (enqueue before the agent ever ran).
func connect(ctx context.Context, dataDir string, mode openMode, storeID string) (*agentConn, error) {
	c := control.Dial(control.Endpoint(dataDir))
	err := c.Ping(ctx)
	if err == nil {
		return &agentConn{Client: c, running: true, dataDir: dataDir}, nil
	}
	if errors.Is(err, control.ErrNoPermission) || errors.Is(err, control.ErrPipeSquatted) {
		return nil, err
	}
	path := settings.DataFile(dataDir)
	if _, err := os.Stat(path); errors.Is(err, os.ErrPermission) {
		return nil, fmt.Errorf("cannot read %s: permission denied: run the command as an administrator (sudo), or as the agent's user", path)
	} else if err != nil {
		if mode == readOnly || storeID == "" {
			return nil, fmt.Errorf("%w at %s: check --data-dir / --config (has the agent ever run here?)", errNoDataFile, path)
		}
	}
	q, err := queue.Open(queue.Options{Path: path, StoreID: storeID, ReadOnly: mode == readOnly})
	if errors.Is(err, os.ErrPermission) {
		return nil, fmt.Errorf("cannot open %s: permission denied: run the command as an administrator (sudo), or as the agent's user", path)
	}
	if errors.Is(err, queue.ErrLocked) {
		return nil, fmt.Errorf("the data file %s is locked by another process, but no agent answers on its control socket: is another `agent` command running? try again in a moment", path)
	}
	if err != nil {
		return nil, err
	}
	srv := control.New(control.Options{Queue: q, StoreID: q.StoreID()})
	return &agentConn{Client: control.InProcess(srv.ControlHandler()), dataDir: dataDir, q: q}, nil
}
