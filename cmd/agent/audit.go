package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
)

func newAuditCmd(s *cli.Streams) *cobra.Command {
	var (
		loc          location
		since, until string
		actions      []string
		key, actor   string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit journal: who did what, when, why, to which keys",
		Long: `Show the audit journal, oldest first: quarantines, redrives, purges, exports
and the configuration at each start-up, with who (the agent, a local user,
or a remote operator), when, why and which keys. Events are kept 730 days by
default (retention.journal).

Remote operators appear as remote:<name> (<key>) when the configuration
names them (remote.operators). The table abbreviates keys; --json prints
them in full.`,
		Args: cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var f dlq.AuditFilter
			now := time.Now()
			var err error
			if f.Since, err = cli.TimeFlag("since", since, now); err != nil {
				return err
			}
			if f.Until, err = cli.TimeFlag("until", until, now); err != nil {
				return err
			}
			f.Actions, f.Key, f.Actor = actions, key, actor
			names := operatorNames(&loc)
			if len(names) > 0 {
				// The journal holds keys; names are matched after naming.
				f.Actor = ""
			}
			conn, err := dial(cmd.Context(), &loc, readOnly)
			if err != nil {
				return err
			}
			defer conn.Close()
			res, err := conn.Audit(cmd.Context(), f)
			if err != nil {
				return apiError(err)
			}
			if len(names) > 0 {
				res.Events = nameActors(res.Events, names, actor)
			}
			if asJSON {
				return cli.PrintJSON(s.Out, res)
			}
			renderAudit(s.Out, res.Events)
			return nil
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	fs.StringVar(&since, "since", "", "only events at or after T: RFC 3339 time, date (2026-03-01) or duration ago (24h, 7d)")
	fs.StringVar(&until, "until", "", "only events before T (same forms as --since)")
	fs.StringSliceVar(&actions, "action", nil, "only these actions: "+strings.Join(queue.Actions, ", ")+" (repeat or comma-separate)")
	fs.StringVar(&key, "key", "", "only events about this key (or keys starting with it)")
	fs.StringVar(&actor, "actor", "", "only events whose actor contains this, e.g. alice, local:bob, remote: (case ignored)")
	fs.BoolVar(&asJSON, "json", false, "print the events as JSON, keys in full")
	return cmd
}

func renderAudit(w io.Writer, events []queue.Event) {
	if len(events) == 0 {
		fmt.Fprintln(w, "no audit events")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACTION\tACTOR\tCOUNT\tKEYS\tREASON\tDETAIL")
	for _, e := range events {
		count := fmt.Sprint(e.Count)
		if e.Part != "" {
			count += " (part " + e.Part + ")"
		}
		// DETAIL comes last: the last cell of a row does not widen a column.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format("2006-01-02 15:04:05Z"), e.Action, e.Actor, count, abbreviateKeys(e.Keys), cli.OneLine(cmp.Or(e.Reason, "-")), details(e.Detail))
	}
	tw.Flush()
}

// abbreviateKeys shows the first keys by their first 8 characters.
func abbreviateKeys(keys []string) string {
	const show = 3
	if len(keys) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range keys[:min(len(keys), show)] {
		parts = append(parts, k[:min(len(k), 8)]+"…")
	}
	s := strings.Join(parts, " ")
	if len(keys) > show {
		s += fmt.Sprintf(" +%d more", len(keys)-show)
	}
	return s
}

func details(d map[string]string) string {
	if len(d) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + cli.OneLine(d[k])
	}
	return strings.Join(parts, " ")
}

// remoteActorPrefix starts the actor of every remote command in the
// journal: remote:<operator key>, or remote:unsigned.
var remoteActorPrefix = strings.TrimSuffix(remote.ActorUnsigned, "unsigned")

// operatorNames maps operator keys to the names remote.operators gives
// them in the configuration, when one can be read.
func operatorNames(loc *location) map[string]string {
	c, _, err := loc.loadConfig()
	ops := c.RemoteSection().Operators
	if err != nil || len(ops) == 0 {
		return nil
	}
	names := make(map[string]string, len(ops))
	for name, key := range ops {
		names[key] = name
	}
	return names
}

// nameActors shows each remote operator's key with its name, remote:alice
// (U…), and keeps the events whose actor contains actor (case ignored).
func nameActors(events []queue.Event, names map[string]string, actor string) []queue.Event {
	actor = strings.ToLower(strings.TrimSpace(actor))
	out := events[:0]
	for _, e := range events {
		if key, ok := strings.CutPrefix(e.Actor, remoteActorPrefix); ok {
			if name := names[key]; name != "" {
				e.Actor = remoteActorPrefix + name + " (" + key + ")"
			}
		}
		if actor == "" || strings.Contains(strings.ToLower(e.Actor), actor) {
			out = append(out, e)
		}
	}
	return out
}
