package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/progress"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
)

// errAgentRunning is the answer when the agent holds the data file.
var errAgentRunning = errors.New("the agent is running (it holds the data file): stop the service first (`" + installer.Command() + " stop`, or stop `" + installer.Command() + " run`), then run `" + installer.Command() + " compact` again; the agent also compacts by itself at start-up when most of the file is free")

// compactReport is what `agent compact --json` prints.
type compactReport struct {
	Path        string  `json:"path"`
	Compacted   bool    `json:"compacted"`
	BeforeBytes int64   `json:"before_bytes"`
	AfterBytes  int64   `json:"after_bytes,omitempty"`
	Ratio       float64 `json:"ratio,omitempty"` // after / before
	FreeBytes   int64   `json:"free_bytes"`      // free before compacting
	DurationMS  int64   `json:"duration_ms,omitempty"`
	Journaled   bool    `json:"journaled"`
}

func newCompactCmd(s *cli.Streams) *cobra.Command {
	var (
		loc    location
		asJSON bool
		force  bool
	)
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Shrink the data file (agent stopped)",
		Long: fmt.Sprintf(`Shrink the data file after a large backlog drained: copy everything it
holds into a new file without the free pages, check the new file, and put it
in place of the old one (one atomic rename; a crash at any moment leaves the
old file or the new one, both complete). The compaction is recorded in the
audit journal.

The agent must be stopped: compaction needs the data file to itself. The
agent compacts by itself at start-up when more than %.0f%% of the file and
more than %d MiB are free; without --force this command compacts only then
too, and otherwise says how much is free.`, 100*queue.CompactFreeFraction, queue.CompactFreeBytes>>20),
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dataDir, err := loc.resolveDataDir()
			if err != nil {
				return err
			}
			return compact(cmd.Context(), s, dataDir, asJSON, force)
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&force, "force", false, "compact even when little of the file is free")
	return cmd
}

func compact(ctx context.Context, s *cli.Streams, dataDir string, asJSON, force bool) error {
	path := settings.DataFile(dataDir)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no agent data file at %s: check --data-dir / --config", path)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	running := control.Dial(control.Endpoint(dataDir)).Ping(pctx) == nil
	cancel()
	if running {
		return errAgentRunning
	}
	need, sp, err := queue.CompactionNeeded(path)
	if errors.Is(err, queue.ErrLocked) {
		return errAgentRunning
	}
	if err != nil {
		return err
	}
	rep := compactReport{Path: path, BeforeBytes: sp.FileSize, FreeBytes: sp.Free}
	if !need && !force {
		if asJSON {
			return cli.PrintJSON(s.Out, rep)
		}
		fmt.Fprintf(s.Out, "%s: %s, of which %s (%.0f%%) free: not worth compacting (that takes more than %.0f%% and more than %d MiB free); --force compacts anyway\n",
			path, sizeString(sp.FileSize), sizeString(sp.Free), 100*sp.FreeFraction(), 100*queue.CompactFreeFraction, queue.CompactFreeBytes>>20)
		return nil
	}

	var bar *progress.Bar
	var shown int64
	opts := queue.CompactOptions{Actor: control.LocalActor(), Reason: "agent compact"}
	if !asJSON {
		opts.Progress = func(done, total int64) {
			if bar == nil {
				bar = progress.New(s.Err, "compacting", "keys", int(total))
			}
			bar.Add(int(done - shown))
			shown = done
		}
	}
	res, err := queue.Compact(path, opts)
	bar.Done()
	if errors.Is(err, queue.ErrLocked) {
		return errAgentRunning
	}
	if err != nil && !errors.Is(err, queue.ErrNotJournaled) {
		return err
	}
	rep.Compacted, rep.BeforeBytes, rep.AfterBytes = true, res.Before, res.After
	rep.Ratio, rep.DurationMS, rep.Journaled = res.Ratio(), res.Duration.Milliseconds(), err == nil
	if asJSON {
		if werr := cli.PrintJSON(s.Out, rep); werr != nil {
			return werr
		}
	} else {
		fmt.Fprintf(s.Out, "compacted %s: %s → %s (%.1f%% of before, %s reclaimed) in %s\n",
			path, sizeString(res.Before), sizeString(res.After), 100*res.Ratio(), sizeString(res.Before-res.After), res.Duration.Round(time.Millisecond))
	}
	return err
}

// sizeString is a byte count for people: 1.5 GiB, 120.0 MiB, 512 B.
func sizeString(n int64) string { return status.Bytes(uint64(max(n, 0))) }
