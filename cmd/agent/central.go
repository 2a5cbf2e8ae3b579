package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/reconcile"
	"github.com/rxedge/agent/internal/progress"
)

// newCentralCmd is the group of head office's commands on central as a
// whole; each subcommand is one entry of centralCommands.
func newCentralCmd(s *streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "central",
		Short: "Head office's commands on central as a whole (reconcile, migrate, durability)",
		Long: `Head office's commands on central as a whole:

  reconcile   check central's archive against what every store acknowledged
  migrate     copy a one-partition central's movements into N partitions
  durability  check that central fsyncs every write and replicates its streams`,
	}
	for _, sub := range centralCommands {
		cmd.AddCommand(sub(s))
	}
	return group(cmd)
}

// centralCommands are the subcommands of agent central.
var centralCommands = []func(*streams) *cobra.Command{
	newCentralReconcileCmd,
	newCentralMigrateCmd,
	newCentralDurabilityCmd,
}

func newCentralReconcileCmd(s *streams) *cobra.Command {
	var (
		f      remoteFlags
		stores []string
		since  string
		asCSV  bool
		noAsk  bool
		parts  int
		o      reconcile.Options
	)
	cmd := &cobra.Command{
		Use:   "reconcile [--store ID]... [--since T] [--json|--csv] [--no-ask] --nkey OPERATOR_SEED_FILE --server URL [auth flags]",
		Short: "Check central's archive against what every store acknowledged (exit 3 when something is unexplained)",
		Long: `Check central's archive against what every store acknowledged.

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
fleet view, with the same connection flags as agent remote. The audit user
of the production configuration (agent central-config) has an account of
its own: give it --js-api-prefix rx.audit.api. and --partitions N (it may
not list the streams; with --partitions, RX_ARCHIVE and RX_ARCHIVE_0 … _N-1
are read, those that exist). Without --partitions the streams are listed
and every archive is read. The reconcile command is signed with --nkey (an operator
seed whose public key the stores list in control.operator_keys); --no-ask
reads only, and every missing sequence is then unexplained.

The table lists only stores with something to say, then a total line and
what needs attention; --json and --csv give every store. A progress line
is drawn on stderr when it is a terminal.

Exit status: 0 when nothing is unexplained and there is no conflict,
reused sequence or malformed record; 3 otherwise (as agent status);
1 when the archive or the fleet view cannot be read; 2 for a usage error.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.asJSON && asCSV {
				return usageError("give --json or --csv, not both")
			}
			if f.nkey == "" && !noAsk {
				return usageError("central reconcile: --nkey OPERATOR_SEED_FILE is required to ask the stores (or --no-ask to read only)")
			}
			if parts < 0 || parts > central.MaxPartitions {
				return usageError("--partitions must be between 1 and %d (0: list the streams)", central.MaxPartitions)
			}
			for _, st := range stores {
				if err := storeFlag(st); err != nil {
					return err
				}
			}
			if since != "" {
				t, err := dlq.ParseTime(since, time.Now())
				if err != nil {
					return usageError("--since: %v", err)
				}
				o.Since = t
			}
			c, nc, err := f.client("rxedge-reconcile")
			if err != nil {
				return err
			}
			defer nc.Close()
			o.Conn, o.Stores, o.Timeout = nc, stores, f.wait
			if parts > 0 {
				o.Archives = central.ArchiveStreams(parts)
			}
			if !noAsk {
				o.Asker = c
			}
			var (
				bar   *progress.Bar
				phase string
				drawn uint64
			)
			o.Progress = func(read string, done, total uint64) {
				if read != phase {
					bar.Done()
					bar, phase, drawn = progress.New(s.err, read, int(total)), read, 0
				}
				bar.Add(int(done - drawn))
				drawn = done
			}
			rep, err := reconcile.Run(cmd.Context(), o)
			bar.Done()
			if err != nil {
				return err
			}
			switch {
			case f.asJSON:
				err = printJSON(s.out, rep)
			case asCSV:
				err = reconcile.WriteCSV(s.out, rep)
			default:
				err = reconcile.WriteTable(s.out, rep)
			}
			if err != nil {
				return err
			}
			if !rep.OK() {
				return &exitErr{code: exitAttention}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&stores, "store", nil, "reconcile only this store (repeatable)")
	fs.IntVar(&parts, "partitions", 0, "central's partitions: read RX_ARCHIVE and RX_ARCHIVE_<p> without listing the streams (0: list them)")
	fs.StringVar(&o.APIPrefix, "js-api-prefix", "", "JetStream API prefix of this identity's account (rx.audit.api. for the production configuration's audit user)")
	fs.StringVar(&since, "since", "", "read only the archive stored since then (RFC 3339, a date, or a duration such as 7d); see above")
	fs.BoolVar(&asCSV, "csv", false, "print one CSV row per store")
	fs.BoolVar(&noAsk, "no-ask", false, "read the archive and the fleet view only; ask no store")
	fs.DurationVar(&o.Grace, "grace", reconcile.DefaultGrace, "a movement synced this long before the read, or after, is in transit")
	fs.IntVar(&o.Concurrency, "concurrency", reconcile.DefaultConcurrency, "stores asked at once")
	fs.Uint64Var(&o.MaxAskPerStore, "max-ask", reconcile.DefaultMaxAskPerStore, "missing sequences asked of one store at most")
	fs.IntVar(&o.MaxListed, "max-listed", reconcile.DefaultMaxListed, "runs of missing sequences listed per store")
	f.register(fs, reconcile.DefaultTimeout, "how long to wait for each store's answer",
		"the operator seed file that signs the reconcile command")
	fs.StringVar(&f.nkey, "operator-key", "", "the same as --nkey")
	return cmd
}

var _ reconcile.Asker = (*fleet.Client)(nil)
