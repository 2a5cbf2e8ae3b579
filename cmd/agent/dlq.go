package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/disk"
	"github.com/rxedge/agent/internal/progress"
)

func newDLQCmd(s *cli.Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect and act on quarantined movements",
		Long: `Inspect and act on the quarantine: movements the agent could not deliver
(a permanent refusal by central, or attempts exhausted on errors specific to
the movement).

  list     the quarantined movements and why, without payloads
  show     one movement's whole failure context (its payload with --payload)
  redrive  send movements again, attempts reset (--spread to pace them)
  export   write movements with payloads and context as JSON lines
  purge    remove movements for good, after exporting them to the data directory

Each command works through the running agent's control socket, or on the
data file directly when the agent is stopped. Redrive, export and purge are
recorded in the audit journal with your user name (see ` + "`agent audit`" + `).`,
	}
	cmd.AddCommand(newDLQListCmd(s), newDLQShowCmd(s), newDLQRedriveCmd(s), newDLQExportCmd(s), newDLQPurgeCmd(s))
	return cli.Group(cmd)
}

// dial reaches the agent the location flags name.
func dial(ctx context.Context, loc *location, mode openMode) (*agentConn, error) {
	dataDir, err := loc.resolveDataDir()
	if err != nil {
		return nil, err
	}
	return connect(ctx, dataDir, mode, "")
}

// apiError turns a refusal of the agent into the CLI's exit codes: bad
// input is a usage error (2), anything else an error (1).
func apiError(err error) error {
	var ae *control.APIError
	if errors.As(err, &ae) && ae.Code == http.StatusBadRequest {
		return &cli.Error{Code: cli.ExitUsage, Msg: ae.Body.Error}
	}
	return err
}

func newDLQListCmd(s *cli.Streams) *cobra.Command {
	var (
		loc     location
		ff      cli.FilterFlags
		asJSON  bool
		summary bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List quarantined movements, oldest first (no payloads); --summary counts them by reason and class",
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := time.Now()
			f, err := ff.Filter(now)
			if err != nil {
				return err
			}
			if summary && f.Limit != 0 {
				return cli.UsageError("list: --summary counts every match: leave out --limit")
			}
			conn, err := dial(cmd.Context(), &loc, readOnly)
			if err != nil {
				return err
			}
			defer conn.Close()
			if summary {
				sum, err := conn.DLQSummary(cmd.Context(), f)
				if err != nil {
					return apiError(err)
				}
				if asJSON {
					return cli.PrintJSON(s.Out, sum)
				}
				renderSummary(s.Out, sum)
				return nil
			}
			res, err := conn.DLQList(cmd.Context(), f)
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return cli.PrintJSON(s.Out, res)
			}
			cli.WriteQuarantined(s.Out, *res, now)
			return nil
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	ff.Register(fs, "show at most N, the oldest (0: all)")
	fs.BoolVar(&asJSON, "json", false, "print the list as JSON")
	fs.BoolVar(&summary, "summary", false, "count the movements by reason and class instead of listing them")
	return cmd
}

func renderSummary(w io.Writer, sum *dlq.Summary) {
	if sum.Total.Total == 0 {
		fmt.Fprintln(w, "no quarantined movements")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "REASON\tTOTAL\tCONTROLLED\tORDINARY\t")
	for _, r := range sum.Reasons {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", r.Reason, r.Total, r.Controlled, r.Ordinary)
	}
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", "all", sum.Total.Total, sum.Total.Controlled, sum.Total.Ordinary)
	tw.Flush()
}

func newDLQShowCmd(s *cli.Streams) *cobra.Command {
	var (
		loc         location
		withPayload bool
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "show KEY|KEY-PREFIX|MOVEMENT_ID",
		Short: "Show one quarantined movement's failure context (and payload with --payload)",
		Long: `Show one quarantined movement's failure context: the reason, the last error,
the attempts, the first and last failure, the retry delays waited, the
connection state and the agent version when it was quarantined.

The movement is named by its key, by the start of its key (at least 4
characters, matching no other quarantined movement), or by its movement_id.

The movement itself (its payload, which may hold prescription references) is
shown only with --payload, and each such viewing is recorded in the audit
journal with your user name.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Showing a payload is journalled: the file must be writable.
			mode := readOnly
			if withPayload {
				mode = readWrite
			}
			conn, err := dial(cmd.Context(), &loc, mode)
			if err != nil {
				return err
			}
			defer conn.Close()
			d, err := conn.DLQShow(cmd.Context(), args[0], withPayload)
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return cli.PrintJSON(s.Out, d)
			}
			renderDetail(s.Out, d, withPayload, time.Now())
			return nil
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	fs.BoolVar(&withPayload, "payload", false, "also show the movement itself (may hold patient data)")
	fs.BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func renderDetail(w io.Writer, d *dlq.Detail, withPayload bool, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return fmt.Sprintf("%s (%s ago)", t.Format(time.RFC3339), cli.Age(now.Sub(*t)))
	}
	row("Key", d.Key)
	row("Movement ID", d.MovementID)
	row("Store", d.StoreID)
	row("Class", cli.Class(d.Item))
	row("Sequence", strconv.FormatUint(d.Seq, 10))
	row("Reason", d.Reason)
	row("Last error", strings.TrimSpace(d.ErrorKind+": "+d.ErrorText))
	row("Attempts", strconv.Itoa(d.Attempts))
	row("Enqueued", at(&d.EnqueuedAt))
	row("First failure", at(d.FirstFailure))
	row("Last failure", at(d.LastFailure))
	row("Quarantined", at(&d.QuarantinedAt))
	row("Delays waited", delays(d.DelaysWaitedMS))
	row("Connection", cmp.Or(d.ConnState, "-"))
	row("Agent version", cmp.Or(d.AgentVersion, "-"))
	row("Digest", d.Digest)
	if !withPayload {
		row("Payload", "not shown (add --payload)")
	}
	tw.Flush()
	if withPayload {
		var b bytes.Buffer
		if json.Indent(&b, d.Payload, "  ", "  ") != nil {
			b.Reset()
			b.Write(d.Payload)
		}
		fmt.Fprintf(w, "Payload\n  %s\n", b.String())
	}
}

func delays(ms []int64) string {
	if len(ms) == 0 {
		return "none"
	}
	parts := make([]string, len(ms))
	var total time.Duration
	for i, m := range ms {
		d := time.Duration(m) * time.Millisecond
		total += d
		parts[i] = d.String()
	}
	return fmt.Sprintf("%s (total %s)", strings.Join(parts, ", "), total)
}

func newDLQRedriveCmd(s *cli.Streams) *cobra.Command {
	var (
		loc        location
		sel        dlq.Selection
		reasonText string
		spread     time.Duration
		dryRun     bool
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "redrive KEY… | --all | --reason KIND | --oldest N  --reason-text WHY",
		Short: "Send quarantined movements again, attempts reset",
		Long: `Send quarantined movements again: they go back to pending with their attempts
reset. Select them by key (as for show: a whole key, a key prefix of at
least 4 characters, or a movement_id), --all, --reason KIND and/or
--oldest N (the N oldest, of that reason when --reason is given).

--spread DUR gives each a due time spread evenly at random over the next DUR,
so that a large redrive does not stampede central (at most 24h).
--dry-run lists what would be redriven and changes nothing.

The redrive is recorded in the audit journal with your user name, the
--reason-text and the keys. Exit status 1 when some keys were not
quarantined (the others are redriven).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			sel.Keys = args
			if reasonText == "" && !dryRun {
				return cli.UsageError("redrive: --reason-text WHY is required (it is recorded in the audit journal)")
			}
			mode := readWrite
			if dryRun {
				mode = readOnly
			}
			conn, err := dial(cmd.Context(), &loc, mode)
			if err != nil {
				return err
			}
			defer conn.Close()
			rq := dlq.RedriveRequest{Selection: sel, ReasonText: reasonText, Spread: spread, DryRun: dryRun}
			res, err := redrive(cmd.Context(), conn.Client, rq, asJSON, s)
			if err != nil {
				return err
			}
			if asJSON {
				if err := cli.PrintJSON(s.Out, res); err != nil {
					return err
				}
			} else {
				renderRedrive(s.Out, res, spread)
			}
			if n := len(res.NotFound); n > 0 {
				verb := "redriven"
				if dryRun {
					verb = "would be redriven"
				}
				return &cli.Error{Code: cli.ExitError, Msg: cli.NotQuarantined(n, len(res.Redriven), verb)}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	fs.BoolVar(&sel.All, "all", false, "every quarantined movement")
	fs.StringVar(&sel.Reason, "reason", "", "movements of this reason: a class (permanent, exhausted), a kind (too_large) or both (permanent:too_large)")
	fs.IntVar(&sel.Oldest, "oldest", 0, "the N oldest quarantined movements (of --reason, when given)")
	fs.StringVar(&reasonText, "reason-text", "", "why (required; recorded in the audit journal)")
	fs.DurationVar(&spread, "spread", 0, "spread the due times uniformly over this window, e.g. 10m (at most 24h)")
	fs.BoolVar(&dryRun, "dry-run", false, "list what would be redriven; change nothing")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// redrive runs a redrive, drawing a bar of its progress on a terminal.
func redrive(ctx context.Context, c *control.Client, rq dlq.RedriveRequest, quiet bool, s *cli.Streams) (*dlq.RedriveResult, error) {
	var bar *progress.Bar // nil until the first progress line, and off a terminal
	defer func() { bar.Done() }()
	if !quiet {
		prev := 0
		rq.Progress = func(done, total int) {
			if bar == nil {
				bar = progress.New(s.Err, "redrive", "movements", total)
			}
			bar.Add(done - prev)
			prev = done
		}
	}
	res, err := c.DLQRedrive(ctx, rq)
	if err != nil {
		return nil, apiError(err)
	}
	return res, nil
}

func renderRedrive(w io.Writer, res *dlq.RedriveResult, spread time.Duration) {
	if res.DryRun {
		fmt.Fprintf(w, "would redrive %d movement(s)\n", len(res.Redriven))
		if len(res.Redriven) > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tREASON")
			for _, r := range res.Redriven {
				fmt.Fprintf(tw, "%s\t%s\n", r.Key, r.Reason)
			}
			tw.Flush()
		}
	} else {
		when := "due now"
		if spread > 0 && len(res.Redriven) > 0 {
			when = "due over the next " + spread.String()
		}
		fmt.Fprintf(w, "redriven %d movement(s), %s\n", len(res.Redriven), when)
	}
	cli.WriteMissing(w, res.NotFound, "purged: it can never be redriven")
	for _, g := range res.Guidance {
		fmt.Fprintf(w, "note: %s\n", g)
	}
}

func newDLQExportCmd(s *cli.Streams) *cobra.Command {
	var (
		loc        location
		ff         cli.FilterFlags
		out        string
		reasonText string
	)
	cmd := &cobra.Command{
		Use:   "export [-o FILE]",
		Short: "Write quarantined movements, with payloads and failure context, as JSON lines",
		Long: `Write quarantined movements as JSON lines, oldest first: each line holds the
failure context (as in ` + "`agent dlq show`" + `), the store, the digest and the
payload. The export holds patient data: keep the file where only
administrators can read it (-o creates it readable by its owner only).

The export is recorded in the audit journal, with its keys, before anything
is written.`,
		Args: cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := ff.Filter(time.Now())
			if err != nil {
				return err
			}
			dest, w := "stdout", s.Out
			var file *os.File
			if out != "" && out != "-" {
				abs, err := filepath.Abs(out)
				if err != nil {
					return err
				}
				dest = abs
				// Create it before asking the agent, so that a bad path
				// fails before the export is journalled.
				file, err = os.OpenFile(abs, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
				if errors.Is(err, os.ErrExist) {
					return cli.UsageError("export: %s exists: choose another file name", out)
				}
				if err != nil {
					return fmt.Errorf("export: %w", err)
				}
				w = file
			}
			n, err := exportTo(cmd.Context(), &loc, f, reasonText, dest, w, file != nil, s)
			if file != nil {
				if err == nil {
					err = file.Sync()
				}
				if cerr := file.Close(); err == nil {
					err = cerr
				}
				if err == nil {
					// Report the file only once its name is durable too.
					err = disk.SyncDir(filepath.Dir(file.Name()))
				}
				if err != nil {
					os.Remove(file.Name())
				}
			}
			if err != nil {
				return err
			}
			msg := fmt.Sprintf("exported %d movement(s)", n)
			if file != nil {
				fmt.Fprintf(s.Out, "%s to %s\n", msg, dest)
			} else {
				fmt.Fprintln(s.Err, msg)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	ff.Register(fs, "export at most N, the oldest (0: all)")
	fs.StringVarP(&out, "output", "o", "", "write to FILE, created new with mode 0600 (default: standard output)")
	fs.StringVar(&reasonText, "reason-text", "", "why (optional; recorded in the audit journal)")
	return cmd
}

func exportTo(ctx context.Context, loc *location, f dlq.Filter, reasonText, dest string, w io.Writer, showBar bool, s *cli.Streams) (int, error) {
	conn, err := dial(ctx, loc, readWrite)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ex, err := conn.DLQExport(ctx, dlq.ExportRequest{Filter: f, ReasonText: reasonText, Dest: dest})
	if err != nil {
		return 0, apiError(err)
	}
	defer ex.Close()
	var bar *progress.Bar
	if showBar {
		bar = progress.New(s.Err, "export", "movements", ex.Count)
	}
	cw := &lineCounter{w: w, bar: bar}
	_, err = io.Copy(cw, ex)
	bar.Done()
	var xe *control.ExportError
	if errors.As(err, &xe) {
		return cw.lines, fmt.Errorf("export: incomplete: %s", xe.Msg)
	}
	if err != nil {
		return cw.lines, fmt.Errorf("export: after %d movement(s): %w", cw.lines, err)
	}
	return cw.lines, nil
}

// lineCounter counts the lines written through it.
type lineCounter struct {
	w     io.Writer
	bar   *progress.Bar
	lines int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	k := bytes.Count(p[:n], []byte{'\n'})
	c.lines += k
	c.bar.Add(k)
	return n, err
}

func newDLQPurgeCmd(s *cli.Streams) *cobra.Command {
	var (
		loc        location
		sel        dlq.Selection
		reasonText string
		yes        bool
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "purge KEY… | --all | --reason KIND | --oldest N  --reason-text WHY --yes",
		Short: "Remove quarantined movements for good (exported to the data directory first)",
		Long: `Remove quarantined movements for good. The movements are first written, with
their payloads and failure context, to purged-<UTC time>.jsonl in the data
directory (fsynced); only then are they removed. A purged key can never come
back: not by redrive, not by submitting the movement again. Select them as
for a redrive: by key, --all, --reason KIND and/or --oldest N.

Requires --reason-text and --yes. Recorded in the audit journal with your
user name, the reason and the keys. Exit status 1 when some keys were not
quarantined (the others are purged).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			sel.Keys = args
			switch {
			case len(args) == 0 && !sel.All && sel.Reason == "" && sel.Oldest == 0:
				return cli.UsageError("purge: give the keys of the movements to purge, or --all, --reason KIND or --oldest N (see `agent dlq list`)")
			case reasonText == "":
				return cli.UsageError("purge: --reason-text WHY is required (it is recorded in the audit journal)")
			case !yes && len(args) > 0:
				return cli.UsageError("purge: removes %d movement(s) for good (they are exported to the data directory first): add --yes to confirm", len(args))
			case !yes:
				return cli.UsageError("purge: removes the selected movements for good (they are exported to the data directory first): see them with `agent dlq list`, then add --yes to confirm")
			}
			conn, err := dial(cmd.Context(), &loc, readWrite)
			if err != nil {
				return err
			}
			defer conn.Close()
			res, err := conn.DLQPurge(cmd.Context(), dlq.PurgeRequest{Keys: sel.Keys, All: sel.All, Reason: sel.Reason, Oldest: sel.Oldest, ReasonText: reasonText, Confirm: yes})
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				if err := cli.PrintJSON(s.Out, res); err != nil {
					return err
				}
			} else {
				if res.ExportFile != "" {
					fmt.Fprintf(s.Out, "exported %d movement(s) to %s\n", len(res.Purged), res.ExportFile)
				}
				fmt.Fprintf(s.Out, "purged %d movement(s)\n", len(res.Purged))
				cli.WriteMissing(s.Out, res.NotFound, "already purged")
			}
			if n := len(res.NotFound); n > 0 {
				return &cli.Error{Code: cli.ExitError, Msg: cli.NotQuarantined(n, len(res.Purged), "purged")}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	fs.BoolVar(&sel.All, "all", false, "every quarantined movement")
	fs.StringVar(&sel.Reason, "reason", "", "movements of this reason: a class (permanent, exhausted), a kind (too_large) or both (permanent:too_large)")
	fs.IntVar(&sel.Oldest, "oldest", 0, "the N oldest quarantined movements (of --reason, when given)")
	fs.StringVar(&reasonText, "reason-text", "", "why (required; recorded in the audit journal)")
	fs.BoolVar(&yes, "yes", false, "confirm: the movements are removed for good")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
