package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/progress"
	"github.com/rxedge/agent/internal/secret"
)

// ledgerConn are the connection flags verify, prove and witness share
// with hq reconcile.
type ledgerConn struct {
	remote    remoteFlags
	parts     int
	apiPrefix string
}

// register adds the flags; ask adds those of asking the stores (--nkey,
// --wait, --valid-for), else only the connection's and --json.
func (c *ledgerConn) register(cmd *cobra.Command, ask bool) {
	fs := cmd.Flags()
	fs.IntVar(&c.parts, "partitions", 0, "central's partitions: read RX_ARCHIVE and RX_ARCHIVE_<p> without listing the streams (0: list them)")
	fs.StringVar(&c.apiPrefix, "js-api-prefix", "", "JetStream API prefix of this identity's account (rx.audit.api. for the production configuration's audit user, rx.witness-api. for its witness user)")
	if !ask {
		c.remote.nats.Register(fs, "")
		fs.BoolVar(&c.remote.asJSON, "json", false, "print the result as JSON")
		return
	}
	c.remote.register(fs, audit.DefaultTimeout, "how long to wait for each store's answer", "the operator seed file that signs the ledger command")
	fs.StringVar(&c.remote.nkey, "operator-key", "", "the same as --nkey")
}

func (c *ledgerConn) archives() ([]string, error) {
	if c.parts < 0 || c.parts > central.MaxPartitions {
		return nil, cli.UsageError("--partitions must be between 1 and %d (0: list the streams)", central.MaxPartitions)
	}
	if c.parts > 0 {
		return central.ArchiveStreams(c.parts), nil
	}
	return nil, nil
}

// readRoster reads --roster, the roster the server configuration is
// generated from (provision.ParseRoster).
func readRoster(path string) (*provision.Roster, error) {
	if path == "" {
		return nil, cli.UsageError("--roster FILE is required (the store ids and their ledger keys, \"S0042 <key>\" a line)")
	}
	return provision.ParseRosterFile(path)
}

// readVerifierKey reads a note verifier key given as the key itself or a
// file holding it.
func readVerifierKey(flag, v string) (note.Verifier, string, error) {
	key := strings.TrimSpace(v)
	if b, err := os.ReadFile(v); err == nil {
		key = strings.TrimSpace(string(b))
	}
	nv, err := note.NewVerifier(key)
	if err != nil {
		return nil, "", cli.UsageError("%s: not a verifier key, nor a file holding one", flag)
	}
	return nv, key, nil
}

const verifyLong = `Check every store's signed log against central's archive, trusting
neither central nor its administrator.

Each store keeps a Merkle log of its movements and publishes signed
checkpoints with them. Verify reads every archive (twice: whole, to check
every checkpoint's signature and every payload, then headers only),
rebuilds each store's tree leaf by leaf in sequence order (memory per log,
not per movement), and checks:

  - every checkpoint is signed by a key of its store in --roster
    ("S0042 <key>" lines; several for a store that rotated its key), and,
    with --witness-key, the witness's countersignatures;
  - each checkpoint extends the one before it (its consistency proof);
  - the root of the archive's leaves at each checkpoint's size is the
    checkpoint's root;
  - the archive holds every leaf up to the latest checkpoint, each payload
    matching its digest;
  - each store's own latest checkpoint (asked with the signed ledger
    command, like reconcile) is in the archive.

Where a root differs, the store is asked for its leaves between the last
checkpoint that matched and the first that did not, and each sequence
that changed is named. Findings (store, log, sequences, checkpoint sizes):

  missing                       a leaf a checkpoint covers is not archived
  altered                       a record differs from what the store logged
  reordered                     a movement sits at another sequence
  forked                        the store signed a checkpoint that does not
                                extend its earlier one
  unverified_checkpoint         a record under a checkpoint token that is
                                not a checkpoint signed by a roster key of
                                its store (unsigned, another key, not a
                                checkpoint): chooses nothing, compared with
                                nothing; the first 8 of a store listed, the
                                rest counted
  bad_signature                 the store's answer, or a record of the
                                witness stream, not signed by a roster key
                                of its store (and the witness key)
  checkpoint_missing_centrally  the store's (or the witness's) newest
                                checkpoint is not in the archive
  uncovered                     archived movements no checkpoint covers yet
                                (after a log's last checkpoint, or before
                                the store's first log): reported, not a
                                failure

With --state FILE the pass is incremental: it starts where the pass that
saved FILE ended, checks that nothing below that position changed (an
archive recreated, its first sequence moved, the last record read back
different), reads only what the archives gained, re-reads at most
--recheck-budget records verified before (a rolling sweep of the
archives in their order, from each log's anchor: see the README), and
saves its place back to FILE (mode 0600; store ids, log ids, sizes, tree
hashes, no payload and no secret). Without FILE, or after it was
deleted, the pass verifies everything and writes FILE. A state covers
every store, so --state does not go with --store. The --json report's
records counts what the pass read for the first time, rechecked what the
re-check read again.

Exit status: 0 when all holds; 3 on any finding but uncovered; 1 when the
archive (or the state file) cannot be read; 2 for a usage error. The connection flags are
hq reconcile's; the ledger command is signed with --nkey (--no-ask
asks no store, and a dropped newest checkpoint is then not caught).`

type verifyFlags struct {
	conn    ledgerConn
	roster  string
	witness string
	stores  []string
	noAsk   bool
	state   string
	o       audit.Options
}

func newVerifyCmd(s *cli.Streams) *cobra.Command {
	var f verifyFlags
	cmd := &cobra.Command{
		Use:   "verify --roster FILE [--store ID... | --state FILE [--recheck-budget N]] [--witness-key KEY] [--json] --nkey OPERATOR_SEED_FILE --server URL [auth flags]",
		Short: "Check the stores' signed logs against central's archive (exit 3 on a finding)",
		Long:  verifyLong,
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return f.run(cmd.Context(), s) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.roster, "roster", "", "the roster: a store id and its ledger key a line")
	fs.StringArrayVar(&f.stores, "store", nil, "verify only this store (repeatable)")
	fs.StringVar(&f.witness, "witness-key", "", "head office's witness verifier key (or a file holding it): check its countersignatures")
	fs.BoolVar(&f.noAsk, "no-ask", false, "ask no store for its latest checkpoint or its leaves")
	fs.IntVar(&f.o.MaxListed, "max-listed", audit.DefaultMaxListed, "findings listed at most (counts are whole)")
	fs.StringVar(&f.state, "state", "", "verify incrementally: start from this state file, read only what is new, and save the place back (created when missing)")
	fs.Int64Var(&f.o.RecheckBudget, "recheck-budget", audit.DefaultRecheckBudget, "with --state, records verified before that a pass re-reads (a rolling sweep; 0 or less: none)")
	f.conn.register(cmd, true)
	return cmd
}

func (f *verifyFlags) run(ctx context.Context, s *cli.Streams) error {
	roster, err := readRoster(f.roster)
	if err != nil {
		return err
	}
	if err := f.scope(); err != nil {
		return err
	}
	if f.conn.remote.nkey == "" && !f.noAsk {
		return cli.UsageError("verify: --nkey OPERATOR_SEED_FILE is required to ask the stores (make one with `hq keys operator --out FILE`), or --no-ask")
	}
	o := f.o
	if f.state != "" {
		o.State = audit.FileState(f.state)
	}
	if o.RecheckBudget == 0 {
		o.RecheckBudget = -1 // Options reads 0 as the default, the flag as none
	}
	if o.Archives, err = f.conn.archives(); err != nil {
		return err
	}
	if f.witness != "" {
		if o.Witness, _, err = readVerifierKey("--witness-key", f.witness); err != nil {
			return err
		}
	}
	c, nc, err := f.conn.remote.client("rxedge-verify")
	if err != nil {
		return err
	}
	defer nc.Close()
	o.Conn, o.APIPrefix, o.Roster, o.Stores, o.Timeout = nc, f.conn.apiPrefix, roster, f.stores, f.conn.remote.wait
	if !f.noAsk {
		o.Asker = c
	}
	bars := progress.NewPhases(s.Err, "records")
	o.Progress = bars.Update
	rep, err := audit.Verify(ctx, o)
	bars.Done()
	if err != nil {
		return err
	}
	if f.conn.remote.asJSON {
		err = cli.PrintJSON(s.Out, rep)
	} else {
		err = writeVerify(s.Out, rep)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return &cli.Error{Code: cli.ExitAttention}
	}
	return nil
}

// scope checks --store and --state: a state covers every store, so a
// pass over some stores cannot keep one.
func (f *verifyFlags) scope() error {
	for _, st := range f.stores {
		if err := storeFlag(st); err != nil {
			return err
		}
	}
	if f.state != "" && len(f.stores) > 0 {
		return cli.UsageError("verify: --state covers every store; give --store without --state, or --state without --store")
	}
	return nil
}

func writeVerify(w io.Writer, rep *audit.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STORE\tLOG\tFIRST\tLEAVES\tCHECKPOINTS\tLATEST\tSTORE LATEST\tWITNESSED\tMATCHED")
	for _, l := range rep.Logs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", l.Store, l.Log, l.First, l.Leaves, l.Checkpoints, l.Latest, l.StoreLatest, l.Witnessed, l.Matched)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	unverified := ""
	if n := rep.Counts[audit.KindUnverifiedCheckpoint]; n > 0 {
		unverified = fmt.Sprintf(", %d under checkpoint tokens not signed by their store", n)
	}
	fmt.Fprintf(w, "\n%d records (%d movements, %d signed checkpoints%s) of %d stores read in %.1fs\n",
		rep.Records, rep.Movements, rep.Checkpoints, unverified, rep.Stores, rep.Seconds)
	if rep.Incremental || rep.Rechecked > 0 {
		fmt.Fprintf(w, "incremental: %d records new since the saved state, %d verified before re-checked\n", rep.Records, rep.Rechecked)
	}
	for _, f := range rep.Findings {
		seqs := ""
		if f.From > 0 {
			seqs = fmt.Sprintf(" sequences %d-%d", f.From, f.To)
		}
		sizes := ""
		if len(f.Sizes) > 0 {
			sizes = " sizes " + cli.Numbers(f.Sizes)
		}
		if f.Count > 0 {
			sizes += fmt.Sprintf(" (%d records)", f.Count)
		}
		fmt.Fprintf(w, "%s: store %s log %s%s%s: %s\n", f.Kind, f.Store, f.Log, seqs, sizes, f.Detail)
	}
	if rep.MoreFindings > 0 {
		fmt.Fprintf(w, "… and %d more findings (see --max-listed)\n", rep.MoreFindings)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if rep.OK() {
		_, err := fmt.Fprintln(w, "OK: every log holds")
		return err
	}
	_, err := fmt.Fprintln(w, "FAILED: see the findings above")
	return err
}

const proveLong = `Write the proof that one movement is in its store's signed log, for an
inspector to check with hq verify-proof, with no network.

The movement (KEY, its 32-hex key) is looked up in the archives (only
--store's with --store); the newest checkpoint of its log that a key of
its store in --roster signed and that covers it (a countersigned one when
the witness signed one) is taken, and the inclusion proof is computed from
the archive's leaves, in memory that does not grow with the log. Records
under checkpoint tokens that no roster key of the store signed choose
nothing: they are passed over and counted on stderr. Without --roster no
checkpoint can be authenticated, and prove writes nothing. With
--witness-key only a checkpoint of RX_WITNESS that the witness's key
countersigned is taken from there (without it, the countersignature is
left to hq verify-proof --witness-key to check). The file
(--out, default stdout) holds the payload, its leaf, the inclusion proof
and the signed checkpoint; its format is central/ledger's Proof.

Exit status: 0 written; 1 when the movement is not archived, no
checkpoint covers it yet, or the archive does not match the checkpoint
(run hq verify); 2 for a usage error (--roster missing).`

func newProveCmd(s *cli.Streams) *cobra.Command {
	var (
		conn   ledgerConn
		store  string
		out    string
		roster string
		noWit  bool
		witKey string
	)
	cmd := &cobra.Command{
		Use:   "prove KEY --roster FILE [--store ID] [--witness-key KEY] [--out FILE] --server URL [auth flags]",
		Short: "Write an inspector's proof of one movement (check it with hq verify-proof)",
		Long:  proveLong,
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := audit.ProveOptions{Key: args[0], Store: store, NoWitness: noWit}
			if store != "" {
				if err := storeFlag(store); err != nil {
					return err
				}
			}
			var err error
			if o.Roster, err = readRoster(roster); err != nil {
				return err
			}
			if witKey != "" {
				if o.Witness, _, err = readVerifierKey("--witness-key", witKey); err != nil {
					return err
				}
			}
			if o.Archives, err = conn.archives(); err != nil {
				return err
			}
			nc, err := conn.remote.nats.Connect("rxedge-prove")
			if err != nil {
				return err
			}
			defer nc.Close()
			o.Conn, o.APIPrefix = nc, conn.apiPrefix
			bars := progress.NewPhases(s.Err, "records")
			o.Progress = bars.Update
			var notes []string
			o.Note = func(n string) { notes = append(notes, n) }
			p, err := audit.Prove(cmd.Context(), o)
			bars.Done()
			for _, n := range notes {
				fmt.Fprintf(s.Err, "note: %s\n", n)
			}
			if err != nil {
				return err
			}
			b, err := p.Marshal()
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = s.Out.Write(b)
				return err
			}
			return os.WriteFile(out, b, 0o644)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&store, "store", "", "the movement's store (faster: reads only its archive)")
	fs.StringVar(&roster, "roster", "", "the roster: a store id and its ledger keys a line (required: only checkpoints a roster key of the store signed are taken)")
	fs.StringVar(&out, "out", "", "the proof file to write (default stdout)")
	fs.BoolVar(&noWit, "no-witness", false, "do not look for a countersigned checkpoint (an identity that may not read RX_WITNESS)")
	fs.StringVar(&witKey, "witness-key", "", "head office's witness verifier key (or a file holding it): take only checkpoints it countersigned from RX_WITNESS")
	conn.register(cmd, false)
	return cmd
}

const verifyProofLong = `Check an inspector's proof of one movement (written by hq prove) with no network and no access to central:

  1. the payload's SHA-256 is the leaf's digest;
  2. the checkpoint is signed by --store-key, a key of the proof's store
     (from the roster, or the store's agent status --json,
     ledger.public_key), and with --witness-key countersigned by head
     office's witness;
  3. the leaf's sequence is its place in the checkpoint's log;
  4. the inclusion proof leads from the leaf to the checkpoint's root.

Exit status: 0 the proof holds; 3 it does not (the failed check is
named); 1 the file cannot be read; 2 for a usage error.`

// newVerifyProofCmd is hq verify-proof.
func newVerifyProofCmd(s *cli.Streams) *cobra.Command {
	var storeKey, witnessKey string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify-proof FILE --store-key KEY [--witness-key KEY] [--json]",
		Short: "Check an inspector's proof of one movement, offline (exit 3 when it does not hold)",
		Long:  verifyProofLong,
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if storeKey == "" {
				return cli.UsageError("--store-key KEY is required (the store's verifier key, or a file holding it)")
			}
			_, sk, err := readVerifierKey("--store-key", storeKey)
			if err != nil {
				return err
			}
			wk := ""
			if witnessKey != "" {
				if _, wk, err = readVerifierKey("--witness-key", witnessKey); err != nil {
					return err
				}
			}
			b, err := readLimited(args[0], ledger.MaxProof)
			if err != nil {
				return err
			}
			type result struct {
				OK        bool   `json:"ok"`
				Error     string `json:"error,omitempty"`
				Store     string `json:"store,omitempty"`
				Log       string `json:"log,omitempty"`
				Seq       uint64 `json:"seq,omitempty"`
				Key       string `json:"key,omitempty"`
				Size      int64  `json:"checkpoint_size,omitempty"`
				SignedAt  string `json:"checkpoint_time,omitempty"`
				Witnessed bool   `json:"witnessed"`
			}
			var r result
			p, err := ledger.ParseProof(b)
			if err == nil {
				var res ledger.ProofResult
				if res, err = ledger.CheckProof(p, sk, wk); err == nil {
					r = result{OK: true, Store: res.Checkpoint.Store, Log: res.Checkpoint.Log, Seq: res.Leaf.Seq, Key: p.Leaf.Key,
						Size: res.Checkpoint.Size, SignedAt: res.Checkpoint.Time.Format(time.RFC3339), Witnessed: res.Witnessed}
				}
			}
			if err != nil {
				r.Error = err.Error()
			}
			if asJSON {
				if err := cli.PrintJSON(s.Out, r); err != nil {
					return err
				}
			} else if r.OK {
				w := ""
				if r.Witnessed {
					w = ", countersigned by the witness"
				}
				fmt.Fprintf(s.Out, "OK: movement %s is sequence %d of store %s's log %s, in its checkpoint of %d leaves signed %s%s\n",
					r.Key, r.Seq, r.Store, r.Log, r.Size, r.SignedAt, w)
			} else {
				fmt.Fprintf(s.Out, "FAILED: %s\n", r.Error)
			}
			if !r.OK {
				return &cli.Error{Code: cli.ExitAttention}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&storeKey, "store-key", "", "the store's verifier key, or a file holding it")
	fs.StringVar(&witnessKey, "witness-key", "", "head office's witness verifier key, or a file holding it: require its countersignature")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// readLimited reads a file of at most max bytes.
func readLimited(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: over %d bytes: not a proof file", path, max)
	}
	return b, nil
}

const witnessLong = `Countersign the stores' checkpoints as head office's witness.

The witness reads the checkpoints in every archive, in order, and adds its
signature (a second note signature; the store's stays) to a checkpoint
only when it is signed by a key of its store in --roster and consistent
(its proof) with the last checkpoint it countersigned for that log. It
publishes each countersigned checkpoint to the stream RX_WITNESS (subject
rx.witness.<store>), where hq verify --witness-key and hq prove find
them. hq provision creates RX_WITNESS; on a central where it is missing
the witness tries to create it, and says to run hq provision when it may
not. A checkpoint it refuses is logged (reason,
store, log, sizes) and counted in the metric
rxedge_witness_checkpoints_total{result="refused",reason=...} served on
--listen.

In production it runs as the generated configuration's witness user, in an
account of its own, which may read the archives and RX_WITNESS and
publish countersignatures, nothing else:

  NATS_PASSWORD=… hq witness --signing-key witness.key \
    --roster roster.txt --state /var/lib/rxedge/witness.state \
    --partitions N --server URL --user witness \
    --js-api-prefix rx.witness-api.

(--partitions names the archives: the witness user may not list streams.)
The audit user reads RX_WITNESS too, for verify --witness-key and prove.

Its state (the last countersigned size and root of each log, how far each
archive was read, and how far it read RX_WITNESS) is the file --state,
which only the witness host holds, signed with the witness key and
replaced atomically. At start the witness reads RX_WITNESS after that
point (all of it without a state file) and takes each countersignature of
its own key newer than the state's: a crash between a countersignature
and the state's save, or an older state file put back, cannot make it
countersign a fork of what it signed. A state file that is truncated,
damaged, edited, signed by another key, or over 64 MiB is refused: restore
it from its backup, or move it away to take the state from RX_WITNESS
(the archives are then read again from the start).

--once reads the archives to their end and exits; otherwise it runs until
stopped, reading again every --interval. Generate its key with hq
witness-key.`

func newWitnessCmd(s *cli.Streams) *cobra.Command {
	var (
		conn     ledgerConn
		key      string
		roster   string
		state    string
		once     bool
		interval time.Duration
		listen   string
	)
	cmd := &cobra.Command{
		Use:   "witness --signing-key FILE --roster FILE --state FILE [--once] [--interval D] [--listen ADDR] --server URL [auth flags]",
		Short: "Countersign the stores' checkpoints that extend the last ones countersigned",
		Long:  witnessLong,
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if key == "" || state == "" {
				return cli.UsageError("witness: --signing-key FILE and --state FILE are required")
			}
			if interval <= 0 {
				return cli.UsageError("--interval must be positive")
			}
			signer, err := readNoteSigner(key)
			if err != nil {
				return err
			}
			r, err := readRoster(roster)
			if err != nil {
				return err
			}
			archives, err := conn.archives()
			if err != nil {
				return err
			}
			nc, err := conn.remote.nats.Connect("rxedge-witness")
			if err != nil {
				return err
			}
			defer nc.Close()
			reg := prometheus.NewRegistry()
			log := newLogger(s.Err)
			ctx := cmd.Context()
			w, err := audit.NewWitness(ctx, audit.WitnessOptions{Conn: nc, APIPrefix: conn.apiPrefix, Archives: archives, Roster: r,
				Signer: signer, StateFile: state, Log: log, Registerer: reg})
			if err != nil {
				return err
			}
			if once {
				return witnessOnce(ctx, s, w, conn.remote.asJSON)
			}
			if listen != "" {
				stop, err := serveMetrics(listen, reg)
				if err != nil {
					return err
				}
				defer stop()
			}
			log.Info("witness: running", "interval", interval)
			return w.Run(ctx, interval, func(run audit.WitnessRun) {
				if run.Countersigned > 0 || len(run.Refused) > 0 {
					log.Info("witness: pass", "summary", witnessSummary(run))
				}
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&key, "signing-key", "", "the witness's private key file (hq witness-key); --key is the TLS client key")
	fs.StringVar(&roster, "roster", "", "the roster: a store id and its ledger key a line")
	fs.StringVar(&state, "state", "", "the witness's state file (kept on the witness host)")
	fs.BoolVar(&once, "once", false, "read the archives to their end, then exit")
	fs.DurationVar(&interval, "interval", 30*time.Second, "how often to read the archives again")
	fs.StringVar(&listen, "listen", "", "serve /metrics here, e.g. 127.0.0.1:9466")
	conn.register(cmd, false)
	return cmd
}

// witnessOnce runs one pass of the witness and prints what it did.
func witnessOnce(ctx context.Context, s *cli.Streams, w *audit.Witness, asJSON bool) error {
	run, err := w.Once(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return cli.PrintJSON(s.Out, run)
	}
	_, err = fmt.Fprintln(s.Out, witnessSummary(run))
	return err
}

// readNoteSigner reads the witness's private key (hq witness-key) from
// its file, as every secret file is read.
func readNoteSigner(path string) (note.Signer, error) {
	k, err := secret.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--signing-key: %w", err)
	}
	signer, err := note.NewSigner(strings.TrimSpace(k))
	if err != nil {
		return nil, cli.UsageError("--signing-key: not a note signer key")
	}
	return signer, nil
}

// serveMetrics serves reg's /metrics on addr until the returned stop.
func serveMetrics(addr string, reg *prometheus.Registry) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// witnessSummary is a witness pass in words: "12 checkpoints read: 10
// countersigned, 1 skipped, 1 refused (bad_signature 1)".
func witnessSummary(run audit.WitnessRun) string {
	refused := 0
	for _, n := range run.Refused {
		refused += n
	}
	line := fmt.Sprintf("%d checkpoints read: %d countersigned, %d skipped, %d refused", run.Read, run.Countersigned, run.Skipped, refused)
	if refused > 0 {
		line += " (" + cli.Tally(run.Refused) + ")"
	}
	return line
}

func newWitnessKeyCmd(s *cli.Streams) *cobra.Command {
	var out, name string
	cmd := &cobra.Command{
		Use:   "witness-key --out FILE [--name NAME]",
		Short: "Generate head office's witness key: the private key to FILE, the verifier key printed",
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return cli.UsageError("--out FILE is required")
			}
			skey, vkey, err := audit.GenerateWitnessKey(rand.Reader, name)
			if err != nil {
				return cli.UsageError("--name: %v", err)
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s exists: a witness key is not overwritten", out)
			}
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintln(f, skey); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			_, err = fmt.Fprintln(s.Out, vkey)
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the private key file to create (mode 0600)")
	cmd.Flags().StringVar(&name, "name", audit.DefaultWitnessKeyName, "the key's name")
	return cmd
}

var _ audit.Asker = (*fleet.Client)(nil)
