package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/settings"
)

func newLedgerCmd(s *cli.Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "The store's signing key for its verifiable log",
	}
	cmd.AddCommand(newLedgerRotateCmd(s))
	return cli.Group(cmd)
}

// rotation is what `agent ledger rotate-key --json` prints.
type rotation struct {
	Store     string `json:"store_id"`
	KeyFile   string `json:"key_file"`
	OldKey    string `json:"old_public_key,omitempty"`
	NewKey    string `json:"public_key"`
	KeptAt    string `json:"old_key_kept_at,omitempty"`
	Running   bool   `json:"agent_running"`
	Journaled bool   `json:"journaled"`
}

func newLedgerRotateCmd(s *cli.Streams) *cobra.Command {
	var (
		loc     location
		asJSON  bool
		keepOld bool
		reason  string
	)
	cmd := &cobra.Command{
		Use:   "rotate-key",
		Short: "Replace the store's signing key and print the new public key for the roster",
		Long: `Replace the store's signing key (ledger.key_file) with a new one and print
its public key: add it to the roster after the store id, on a line of its
own ("S0042 <public key>"), keeping the old key's line as long as the
checkpoints it signed are to be verified. The old private key is removed,
or moved aside with --keep-old.

A running agent signs with the new key from its next checkpoint on and
records the change in the audit journal; with the agent stopped this
command records it.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := loc.loadConfig()
			if err != nil {
				return err
			}
			if c.StoreID == "" || c.DataDir == "" {
				return cli.UsageError("which agent? pass --config FILE (or set RXEDGE_STORE_ID and RXEDGE_DATA_DIR)")
			}
			dataDir, err := filepath.Abs(c.DataDir)
			if err != nil {
				return err
			}
			ls, problems := c.Ledger.Validate("ledger", dataDir)
			if len(problems) > 0 {
				return &settings.Error{Problems: problems}
			}
			return rotateKey(cmd.Context(), s, c.StoreID, dataDir, ls.KeyFile, keepOld, reason, asJSON)
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&keepOld, "keep-old", false, "move the old private key aside (key file name + .old-<time>) instead of removing it")
	fs.StringVar(&reason, "reason-text", "", "why the key is replaced (recorded in the audit journal)")
	return cmd
}

func rotateKey(ctx context.Context, s *cli.Streams, store, dataDir, keyFile string, keep bool, reason string, asJSON bool) error {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	running := control.Dial(control.Endpoint(dataDir)).Ping(pctx) == nil
	cancel()
	r, err := notary.RotateKey(keyFile, store, keep, time.Now())
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("%w: run the command as an administrator (sudo) or as the service's account", err)
	}
	if err != nil {
		return err
	}
	out := rotation{Store: store, KeyFile: keyFile, OldKey: r.Old, NewKey: r.New, KeptAt: r.Kept, Running: running}
	if !running {
		if q, err := queue.Open(queue.Options{Path: settings.DataFile(dataDir), StoreID: store}); err == nil {
			jerr := q.Journal(queue.Event{Action: queue.ActionLedger, Actor: control.LocalActor(), Reason: "signing key rotated: " + reason,
				Detail: map[string]string{"old_public_key": r.Old, "public_key": r.New, "old_key_kept": fmt.Sprint(r.Kept != "")}})
			q.Close()
			out.Journaled = jerr == nil
		}
	}
	if asJSON {
		enc := json.NewEncoder(s.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(s.Out, "new signing key for %s in %s\n", store, keyFile)
	if r.Kept != "" {
		fmt.Fprintf(s.Out, "old private key kept at %s\n", r.Kept)
	}
	fmt.Fprintf(s.Out, "add this line to the roster (keep the old key's line while its checkpoints are verified):\n%s %s\n", store, r.New)
	if running {
		fmt.Fprintln(s.Out, "the running agent signs with the new key from its next checkpoint and records the change in its journal")
	} else if !out.Journaled {
		fmt.Fprintln(s.Out, "warning: the data file could not be opened to record the rotation in the journal")
	}
	return nil
}
