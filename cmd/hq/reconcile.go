package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/reconcile"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/progress"
)

// reconcileLong is the help of `hq reconcile`.
const reconcileLong = `Check central's archive against what every store acknowledged.

Every archive stream (RX_ARCHIVE, or RX_ARCHIVE_<p> on a partitioned
central) is read once, in order, headers only, and the sequences (Rx-Seq)
each store has there are gathered. Each store's highest acknowledged
sequence comes from its summary in the fleet view (RX_FLEET). The
sequences from 1 to it that the archive lacks are missing; each store
with missing sequences is asked, with the signed reconcile command, what
it holds for them:

  explained    pending (not delivered yet), quarantined (with its reason),
               purged (who and why), in transit (synced at the store
               within --grace of the read)
  unexplained  synced_not_archived (the store says central has it),
               unknown_pruned, unknown_not_assigned, no_answer, refused,
               bad_answer (the store answered badly), not_asked (--no-ask,
               or over --max-ask sequences of one store)

It also counts repeats (a movement archived twice with the same content,
after an agent resent it past the 35-day dedupe horizon: harmless),
conflicts (a key archived with two contents), reused sequences (one
sequence archived for two keys) and malformed records.

--since T (an RFC 3339 time, a date, or a duration before now such as 7d)
reads only the archive messages stored since T. A store is then checked
only from the lowest sequence of an archived movement it enqueued at or
after T plus --grace (sequences grow with enqueue time, so every later
one was stored after T), up to its highest acknowledged: older gaps are
not reported, and a store with no such movement is not checked. Without
--since, once the archive has dropped its oldest records (after its
retention), each store is checked from its lowest archived sequence.

Connect as an identity that may read the archives and direct get the
fleet view, with the same connection flags as hq remote. The audit user
of the production configuration (hq central-config) has an account of
its own: give it --js-api-prefix rx.audit.api. and --partitions N (it may
not list the streams; with --partitions, RX_ARCHIVE and RX_ARCHIVE_0 … _N-1
are read, those that exist). Without --partitions the streams are listed
and every archive is read. The reconcile command is signed with --nkey (an operator
seed whose public key the stores list in remote.operator_keys); --no-ask
reads only, and every missing sequence is then unexplained.

The table lists only stores with something to say, then a total line and
what needs attention; --json and --csv give every store. A progress line
is drawn on stderr when it is a terminal.

Exit status: 0 when nothing is unexplained and there is no conflict,
reused sequence or malformed record; 3 otherwise (as agent status does);
1 when the archive or the fleet view cannot be read; 2 for a usage error.`

// reconcileFlags are hq reconcile's flags.
type reconcileFlags struct {
	remote remoteFlags
	stores []string
	since  string
	asCSV  bool
	noAsk  bool
	parts  int
	o      reconcile.Options
}

func newReconcileCmd(s *cli.Streams) *cobra.Command {
	var f reconcileFlags
	cmd := &cobra.Command{
		Use:   "reconcile [--store ID]... [--since T] [--json|--csv] [--no-ask] --nkey OPERATOR_SEED_FILE --server URL [auth flags]",
		Short: "Check central's archive against what every store acknowledged (exit 3 when something is unexplained)",
		Long:  reconcileLong,
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return f.run(cmd.Context(), s) },
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&f.stores, "store", nil, "reconcile only this store (repeatable)")
	fs.IntVar(&f.parts, "partitions", 0, "central's partitions: read RX_ARCHIVE and RX_ARCHIVE_<p> without listing the streams (0: list them)")
	fs.StringVar(&f.o.APIPrefix, "js-api-prefix", "", "JetStream API prefix of this identity's account (rx.audit.api. for the production configuration's audit user)")
	fs.StringVar(&f.since, "since", "", "read only the archive stored since then (RFC 3339, a date, or a duration such as 7d); see above")
	fs.BoolVar(&f.asCSV, "csv", false, "print one CSV row per store")
	fs.BoolVar(&f.noAsk, "no-ask", false, "read the archive and the fleet view only; ask no store")
	fs.DurationVar(&f.o.Grace, "grace", reconcile.DefaultGrace, "a movement synced this long before the read, or after, is in transit")
	fs.IntVar(&f.o.Concurrency, "concurrency", reconcile.DefaultConcurrency, "stores asked at once")
	fs.Uint64Var(&f.o.MaxAskPerStore, "max-ask", reconcile.DefaultMaxAskPerStore, "missing sequences asked of one store at most")
	fs.IntVar(&f.o.MaxListed, "max-listed", reconcile.DefaultMaxListed, "runs of missing sequences listed per store")
	f.remote.register(fs, reconcile.DefaultTimeout, "how long to wait for each store's answer",
		"the operator seed file that signs the reconcile command")
	fs.StringVar(&f.remote.nkey, "operator-key", "", "the same as --nkey")
	return cmd
}

// check refuses flags that do not go together and fills in f.o what the
// flags say beyond what they set directly.
func (f *reconcileFlags) check() error {
	switch {
	case f.remote.asJSON && f.asCSV:
		return cli.UsageError("give --json or --csv, not both")
	case f.remote.nkey == "" && !f.noAsk:
		return cli.UsageError("reconcile: --nkey OPERATOR_SEED_FILE is required to ask the stores (make one with `hq keys operator --out FILE`), or --no-ask to read only")
	case f.parts < 0 || f.parts > central.MaxPartitions:
		return cli.UsageError("--partitions must be between 1 and %d (0: list the streams)", central.MaxPartitions)
	}
	for _, st := range f.stores {
		if err := storeFlag(st); err != nil {
			return err
		}
	}
	if f.since != "" {
		t, err := cli.ParseTime(f.since, time.Now())
		if err != nil {
			return cli.UsageError("--since: %v", err)
		}
		f.o.Since = t
	}
	if f.parts > 0 {
		f.o.Archives = central.ArchiveStreams(f.parts)
	}
	f.o.Stores, f.o.Timeout = f.stores, f.remote.wait
	return nil
}

func (f *reconcileFlags) run(ctx context.Context, s *cli.Streams) error {
	if err := f.check(); err != nil {
		return err
	}
	c, nc, err := f.remote.client("rxedge-reconcile")
	if err != nil {
		return err
	}
	defer nc.Close()
	o := f.o
	o.Conn = nc
	if !f.noAsk {
		o.Asker = c
	}
	bars := progress.NewPhases(s.Err, "records")
	o.Progress = bars.Update
	rep, err := reconcile.Run(ctx, o)
	bars.Done()
	if err != nil {
		return err
	}
	switch {
	case f.remote.asJSON:
		err = cli.PrintJSON(s.Out, rep)
	case f.asCSV:
		err = reconcile.WriteCSV(s.Out, rep)
	default:
		err = reconcile.WriteTable(s.Out, rep)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return &cli.Error{Code: cli.ExitAttention}
	}
	return nil
}

var _ reconcile.Asker = (*fleet.Client)(nil)
