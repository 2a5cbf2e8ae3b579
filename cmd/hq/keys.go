package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/internal/cli"
)

// newKeysCmd is `hq keys`: the keys head office makes for itself.
func newKeysCmd(s *cli.Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Make head office's keys (operator)",
		Long: `Make head office's keys:

  operator  the key that signs commands to the stores (remote, reconcile,
            verify), and the public key to put in the stores' settings

The witness's key is made with hq witness-key.`,
	}
	cmd.AddCommand(newKeysOperatorCmd(s))
	return cli.Group(cmd)
}

// keysOperatorLong is the help of `hq keys operator`.
const keysOperatorLong = `Make an operator key: the seed (an NKey user seed, SU…) is written to
FILE with mode 0600, and its public key (U…) is printed on standard
output. An existing FILE is never overwritten: the stores trust the key
it holds.

Put the public key in every store's settings, then restart the agents:

  remote:
    operator_keys: [U…]

and sign with the seed: hq remote … --nkey FILE, hq reconcile --nkey FILE,
hq verify --nkey FILE. Keep FILE at head office, readable only by those
who may command the stores. Use another key for logging in to NATS.`

func newKeysOperatorCmd(s *cli.Streams) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "operator --out FILE",
		Short: "Make an operator key: the seed to FILE (0600), the public key printed for the stores' remote.operator_keys",
		Long:  keysOperatorLong,
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return cli.UsageError("keys operator: --out FILE is required (where the seed is written)")
			}
			seed, pub, err := command.NewOperatorKey(rand.Reader)
			if err != nil {
				return err
			}
			defer clear(seed)
			if err := writeNew(out, append(seed, '\n')); err != nil {
				return err
			}
			fmt.Fprintln(s.Out, pub)
			fmt.Fprintf(s.Err, "wrote the operator's seed to %s (mode 0600): keep it at head office\n"+
				"add the public key above to each store's remote.operator_keys, then restart the agent\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the seed file to create (mode 0600; never overwritten)")
	return cmd
}

// writeNew creates path with mode 0600 and writes b, refusing a path that
// exists; a write that fails leaves no file behind.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: a key file is never overwritten (the stores may trust its key): choose another file, or move it away first", path)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
