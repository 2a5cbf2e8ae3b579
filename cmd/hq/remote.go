package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/natsconn"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/status"
)

func newRemoteCmd(s *cli.Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remote",
		Short: "Operate stores over NATS: status, quarantine list and redrive",
		Long: `Operate stores through central (NATS), as an operator:

  status   one store's status (--store ID), or the fleet view (--fleet)
  list     a store's quarantined movements, without payloads
  redrive  send a store's quarantined movements again (signed)

Connect as an operator identity (the ops user of
configs/nats/production.conf.template), with --server and the same
authentication flags as the agent, or with a nats CLI context (--context,
NATS_CONTEXT or the selected one) and NATS_* variables: flags win over
variables, variables over the context. Replies come to the inbox prefix the
server grants that identity: with --user it is _INBOX_<user> unless
--inbox-prefix says otherwise; with --nkey-seed or --creds give
--inbox-prefix.

Every command to a store (status, list, redrive) is signed with the
operator's NKey seed (--nkey FILE, a user seed SU… that hq keys operator
makes); the store applies it
only when the public key is in its remote.operator_keys, and records it
in its audit journal with that key as the actor. A signed command is valid for
--valid-for (at most 5m) and is applied at most once; the store's clock
must agree with yours within 30s.`,
	}
	cmd.AddCommand(newRemoteStatusCmd(s), newRemoteListCmd(s), newRemoteRedriveCmd(s))
	return cli.Group(cmd)
}

// remoteFlags are the flags every remote command has.
type remoteFlags struct {
	nats     natsconn.Flags
	nkey     string
	validFor time.Duration
	wait     time.Duration
	asJSON   bool
}

func (f *remoteFlags) register(fs *pflag.FlagSet, waitDefault time.Duration, waitHelp, nkeyHelp string) {
	f.nats.Register(fs, "")
	fs.StringVar(&f.nkey, "nkey", "", nkeyHelp)
	fs.DurationVar(&f.validFor, "valid-for", command.DefaultValidity, "how long a signed command stays valid (at most 5m)")
	fs.DurationVar(&f.wait, "wait", waitDefault, waitHelp)
	fs.BoolVar(&f.asJSON, "json", false, "print the result as JSON")
}

// client connects and loads the signing key. The caller closes the
// connection.
func (f *remoteFlags) client(name string) (*fleet.Client, *nats.Conn, error) {
	if f.validFor <= 0 || f.validFor > command.MaxLifetime {
		return nil, nil, cli.UsageError("--valid-for must be more than 0 and at most %s", command.MaxLifetime)
	}
	if f.wait <= 0 {
		return nil, nil, cli.UsageError("--wait must be positive")
	}
	var signer *command.Signer
	if f.nkey != "" {
		var err error
		if signer, err = command.LoadSigner(f.nkey); err != nil {
			return nil, nil, fmt.Errorf("--nkey: %w", err)
		}
	}
	nc, err := f.nats.Connect(name)
	if err != nil {
		return nil, nil, err
	}
	c := fleet.NewClient(nc, signer)
	c.ValidFor = f.validFor
	return c, nc, nil
}

// storeFlag checks --store.
func storeFlag(store string) error {
	if store == "" {
		return cli.UsageError("--store ID is required")
	}
	if !central.ValidStoreID(store) {
		return cli.UsageError("--store %q is not a store id (letters, digits, _ and -, at most 32)", store)
	}
	return nil
}

// remoteError turns a store's answer into the CLI's exit codes: arguments
// it refused as given are a usage error (2), anything else an error (1).
func remoteError(err error) error {
	var re *command.Error
	if errors.As(err, &re) && re.Code == command.CodeBadRequest {
		return &cli.Error{Code: cli.ExitUsage, Msg: err.Error()}
	}
	return err
}

// remoteStatusLong is the help of `hq remote status`.
const remoteStatusLong = `Show one store's status document (--store ID: the same as ` + "`agent status`" + ` on
that store; a signed command, --nkey), or the fleet view (--fleet): the
summary every agent writes with each heartbeat into central's bucket
RX_FLEET, under its own store id (the server lets a store write only its
own key). The store id is the key and "last seen" is the server's time of
the write, never what the summary says. With --roster FILE (one store id
per line) stores that never wrote are listed as missing and stores not on
the roster as unknown.

States: ok, needs_attention (movements quarantined, the oldest pending
older than --max-age, sync paused), stale (not seen for --stale), silent
(not seen for --silent), missing, unverifiable (a summary that names
another store or does not read), unknown.

Exit status 3 unless every store is ok, so monitoring systems can run it;
1 when the view cannot be read.`

// remoteStatusFlags are remote status's flags.
type remoteStatusFlags struct {
	remote remoteFlags
	store  string
	whole  bool
	maxAge time.Duration
	roster string
	limits fleet.Limits
}

func newRemoteStatusCmd(s *cli.Streams) *cobra.Command {
	var f remoteStatusFlags
	cmd := &cobra.Command{
		Use:   "status (--store ID | --fleet [--roster FILE]) --server URL [auth flags]",
		Short: "Show a store's status, or the whole fleet (exit 3 when any store needs attention)",
		Long:  remoteStatusLong,
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return f.run(cmd.Context(), s) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.store, "store", "", "the store to ask")
	fs.BoolVar(&f.whole, "fleet", false, "read every store's summary from the fleet view")
	fs.StringVar(&f.roster, "roster", "", "--fleet: file of the store ids that should exist, one a line")
	fs.DurationVar(&f.limits.Stale, "stale", 2*time.Minute, "--fleet: a store not seen for this long is stale")
	fs.DurationVar(&f.limits.Silent, "silent", 15*time.Minute, "--fleet: a store not seen for this long is silent")
	fs.DurationVar(&f.maxAge, "max-age", time.Hour, "pending age above which a store needs attention (exit 3)")
	f.remote.register(fs, 10*time.Second, "how long to wait for the answer",
		"the operator seed file that signs the command (--store)")
	return cmd
}

func (f *remoteStatusFlags) check() error {
	switch {
	case f.store == "" && !f.whole:
		return cli.UsageError("remote status: give --store ID or --fleet")
	case f.store != "" && f.whole:
		return cli.UsageError("remote status: give --store ID or --fleet, not both")
	case f.store != "":
		return storeFlag(f.store)
	case f.limits.Stale <= 0 || f.limits.Silent < f.limits.Stale:
		return cli.UsageError("--stale must be positive and --silent at least --stale")
	}
	return nil
}

func (f *remoteStatusFlags) run(ctx context.Context, s *cli.Streams) error {
	if err := f.check(); err != nil {
		return err
	}
	var stores []string
	if f.roster != "" {
		var err error
		if stores, err = provision.ReadRosterFile(f.roster); err != nil {
			return err
		}
	}
	c, nc, err := f.remote.client("rxedge-remote")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, f.remote.wait)
	defer cancel()
	if f.whole {
		f.limits.MaxAge = f.maxAge
		return remoteFleet(ctx, s, nc, stores, f.limits, f.remote.asJSON)
	}
	st, err := c.Status(ctx, f.store)
	if err != nil {
		return remoteError(err)
	}
	if f.remote.asJSON {
		if err := cli.PrintJSON(s.Out, st); err != nil {
			return err
		}
	} else {
		status.Render(s.Out, st, f.maxAge)
	}
	if len(st.Problems(f.maxAge)) > 0 {
		return &cli.Error{Code: cli.ExitAttention}
	}
	return nil
}

func remoteFleet(ctx context.Context, s *cli.Streams, nc *nats.Conn, roster []string, limits fleet.Limits, asJSON bool) error {
	entries, err := fleet.Read(ctx, nc)
	if err != nil {
		return fmt.Errorf("%w: may this identity read the fleet view ($JS.API.DIRECT.GET.%s), and was it provisioned (hq provision)?", err, central.FleetStreamName)
	}
	view := fleet.Judge(entries, roster, time.Now(), limits)
	if asJSON {
		if err := cli.PrintJSON(s.Out, view); err != nil {
			return err
		}
	} else {
		renderFleet(s.Out, view, time.Now())
	}
	for _, v := range view {
		if v.State != fleet.OK {
			return &cli.Error{Code: cli.ExitAttention}
		}
	}
	if len(view) == 0 {
		return errors.New("the fleet view is empty: no agent has written its summary yet")
	}
	return nil
}

func renderFleet(w io.Writer, view []fleet.Store, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STORE\tFLEET\tLAST SEEN\tSTATE\tPENDING\tQUARANTINED\tOLDEST PENDING\tVERSION")
	var problems []string
	for _, v := range view {
		seen := "never"
		if v.LastSeen != nil {
			seen = cli.Age(now.Sub(*v.LastSeen)) + " ago"
		}
		state, pending, quarantined, oldest, version := "-", "-", "-", "-", "-"
		if m := v.Summary; m != nil {
			state, pending, quarantined, version = m.State, fmt.Sprint(m.Pending), fmt.Sprint(m.Quarantined), cmp.Or(m.Version, "-")
			if m.OldestPendingAge != nil {
				oldest = cli.Age(time.Duration(*m.OldestPendingAge * float64(time.Second)))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Store, v.State, seen, state, pending, quarantined, oldest, version)
		for _, p := range v.Problems {
			problems = append(problems, v.Store+" ("+v.State+"): "+cli.OneLine(p))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "%d store(s)\n", len(view))
	if len(problems) > 0 {
		fmt.Fprintln(w, "\nNeeds attention:")
		for _, p := range problems {
			fmt.Fprintln(w, "  - "+p)
		}
	}
}

func newRemoteListCmd(s *cli.Streams) *cobra.Command {
	var (
		f     remoteFlags
		store string
		ff    cli.FilterFlags
	)
	cmd := &cobra.Command{
		Use:   "list --store ID --server URL [auth flags]",
		Short: "List a store's quarantined movements, oldest first (no payloads)",
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := storeFlag(store); err != nil {
				return err
			}
			now := time.Now()
			filter, err := ff.Filter(now)
			if err != nil {
				return err
			}
			if filter.Limit > command.MaxListLimit {
				return cli.UsageError("--limit must be at most %d over NATS", command.MaxListLimit)
			}
			c, nc, err := f.client("rxedge-remote")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.wait)
			defer cancel()
			res, err := c.List(ctx, store, command.ListArgs{Reason: filter.Reason, Since: filter.Since, Until: filter.Until, Limit: filter.Limit})
			if err != nil {
				return remoteError(err)
			}
			if f.asJSON {
				return cli.PrintJSON(s.Out, res)
			}
			cli.WriteQuarantined(s.Out, res, now)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&store, "store", "", "the store to ask (required)")
	ff.Register(fs, fmt.Sprintf("show at most N, the oldest (default %d, at most %d)", command.DefaultListLimit, command.MaxListLimit))
	f.register(fs, 10*time.Second, "how long to wait for the answer", "optional: sign the request with this operator seed file")
	return cmd
}

// remoteRedriveLong is the help of `hq remote redrive`.
const remoteRedriveLong = `Send a store's quarantined movements again, attempts reset, like
` + "`agent dlq redrive`" + ` on the store. The command is signed with the operator seed
in --nkey; the store applies it once, only if the public key is in its
remote.operator_keys, and records it in its audit journal with
remote:<public key> as the actor and --reason-text as the reason.

--spread DUR spreads the due times over DUR (at most 24h). --dry-run lists
what would be redriven and changes nothing (it is signed all the same).
Exit status 1 when some keys were not quarantined (the others are
redriven), or when the store refused the command.`

func newRemoteRedriveCmd(s *cli.Streams) *cobra.Command {
	var (
		f          remoteFlags
		store      string
		all        bool
		reasonText string
		spread     time.Duration
		dryRun     bool
	)
	cmd := &cobra.Command{
		Use:   "redrive --store ID (KEY… | --all) --reason-text WHY --nkey OPERATOR_SEED_FILE --server URL [auth flags]",
		Short: "Send a store's quarantined movements again (a signed command)",
		Long:  remoteRedriveLong,
		RunE: func(cmd *cobra.Command, keys []string) error {
			if err := storeFlag(store); err != nil {
				return err
			}
			switch {
			case len(keys) == 0 && !all:
				return cli.UsageError("remote redrive: give the keys to redrive, or --all (see `hq remote list`)")
			case len(keys) > 0 && all:
				return cli.UsageError("remote redrive: give keys or --all, not both")
			case reasonText == "" && !dryRun:
				return cli.UsageError("remote redrive: --reason-text WHY is required (it is recorded in the store's audit journal)")
			case f.nkey == "":
				return cli.UsageError("remote redrive: --nkey OPERATOR_SEED_FILE is required: the command must be signed by an operator key the store knows (make one with `hq keys operator --out FILE`)")
			case spread < 0 || spread > command.MaxSpread:
				return cli.UsageError("--spread must be between 0 and %s", command.MaxSpread)
			}
			c, nc, err := f.client("rxedge-remote")
			if err != nil {
				return err
			}
			defer nc.Close()
			a := command.RedriveArgs{Selection: command.Selection{Keys: keys, All: all}, ReasonText: reasonText, DryRun: dryRun}
			if spread > 0 {
				a.Spread = spread.String()
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.wait)
			defer cancel()
			res, err := c.Redrive(ctx, store, a)
			if err != nil {
				var re *command.Error
				if errors.As(err, &re) && res.Redriven > 0 {
					fmt.Fprintf(s.Out, "store %s: %d movement(s) were redriven before it failed\n", store, res.Redriven)
				}
				return remoteError(err)
			}
			if f.asJSON {
				if err := cli.PrintJSON(s.Out, res); err != nil {
					return err
				}
			} else {
				renderRemoteRedrive(s.Out, store, res, spread)
			}
			if n := len(res.NotFound); n > 0 {
				verb := "redriven"
				if dryRun {
					verb = "would be redriven"
				}
				return &cli.Error{Code: cli.ExitError, Msg: cli.NotQuarantined(n, res.Redriven, verb)}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&store, "store", "", "the store (required)")
	fs.BoolVar(&all, "all", false, "every quarantined movement of the store")
	fs.StringVar(&reasonText, "reason-text", "", "why (required; recorded in the store's audit journal)")
	fs.DurationVar(&spread, "spread", 0, "spread the due times uniformly over this window, e.g. 10m (at most 24h)")
	fs.BoolVar(&dryRun, "dry-run", false, "list what would be redriven; change nothing")
	f.register(fs, 30*time.Second, "how long to wait for the store's answer",
		"operator NKey seed file (SU…) to sign the command with (required)")
	return cmd
}

func renderRemoteRedrive(w io.Writer, store string, res command.RedriveResult, spread time.Duration) {
	switch {
	case res.DryRun:
		fmt.Fprintf(w, "store %s: would redrive %d movement(s)\n", store, res.Redriven)
		for _, k := range res.Keys {
			fmt.Fprintln(w, "  "+k)
		}
		if res.MoreKeys > 0 {
			fmt.Fprintf(w, "  … and %d more\n", res.MoreKeys)
		}
	default:
		when := "due now"
		if spread > 0 && res.Redriven > 0 {
			when = "due over the next " + spread.String()
		}
		fmt.Fprintf(w, "store %s: redriven %d movement(s), %s\n", store, res.Redriven, when)
	}
	fmt.Fprintf(w, "recorded as %s, nonce %s\n", res.Actor, res.Nonce)
	cli.WriteMissing(w, res.NotFound, "purged: it can never be redriven")
}
