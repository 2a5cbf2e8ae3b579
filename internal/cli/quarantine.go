package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/rxedge/agent/central/command"
)

// FilterFlags select quarantined movements by reason and time: the flags
// of `agent dlq list` and `hq remote list`.
type FilterFlags struct {
	reason       string
	since, until string
	limit        int
}

// Register adds --reason, --since, --until and --limit (with limitHelp).
func (f *FilterFlags) Register(fs *pflag.FlagSet, limitHelp string) {
	fs.StringVar(&f.reason, "reason", "", "only this reason: a class (permanent, exhausted), a kind (too_large) or both (permanent:too_large)")
	fs.StringVar(&f.since, "since", "", "only quarantined at or after T: RFC 3339 time, date (2026-03-01) or duration ago (24h, 7d)")
	fs.StringVar(&f.until, "until", "", "only quarantined before T (same forms as --since)")
	fs.IntVar(&f.limit, "limit", 0, limitHelp)
}

// Filter is the selection the flags give, the times relative to now; a
// value that does not parse is a usage error.
func (f *FilterFlags) Filter(now time.Time) (command.ListArgs, error) {
	out := command.ListArgs{Reason: f.reason, Limit: f.limit}
	var err error
	if out.Since, err = TimeFlag("since", f.since, now); err != nil {
		return out, err
	}
	if out.Until, err = TimeFlag("until", f.until, now); err != nil {
		return out, err
	}
	if f.limit < 0 {
		return out, UsageError("--limit must not be negative")
	}
	return out, nil
}

// WriteQuarantined writes a list of quarantined movements as a table,
// their ages as of now.
func WriteQuarantined(w io.Writer, res command.ListResult, now time.Time) {
	if len(res.Items) == 0 {
		fmt.Fprintln(w, "no quarantined movements")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tCLASS\tREASON\tATTEMPTS\tQUARANTINED\tMOVEMENT_ID")
	for _, it := range res.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s ago\t%s\n", it.Key, Class(it), it.Reason, it.Attempts, Age(now.Sub(it.QuarantinedAt)), it.MovementID)
	}
	tw.Flush()
	if res.Matched > len(res.Items) {
		fmt.Fprintf(w, "showing the %d oldest of %d; raise --limit to see more\n", len(res.Items), res.Matched)
	} else {
		fmt.Fprintf(w, "%d quarantined movement(s)\n", len(res.Items))
	}
}

// Class is a movement's class with its schedule when it has one
// ("controlled/CII").
func Class(it command.Item) string {
	if it.Schedule != "" {
		return it.Class + "/" + it.Schedule
	}
	return it.Class
}

// NotQuarantined is the exit message of an operation that found n keys
// not quarantined and acted on done others.
func NotQuarantined(n, done int, verb string) string {
	if done == 0 {
		return fmt.Sprintf("%d key(s) were not quarantined (see above); none %s", n, verb)
	}
	return fmt.Sprintf("%d key(s) were not quarantined (see above); the other %d %s", n, done, verb)
}

// WriteMissing lists the keys that were not quarantined; purged says
// what a purged key means for the operation.
func WriteMissing(w io.Writer, missing []command.Missing, purged string) {
	for _, m := range missing {
		why := "not quarantined: it is " + m.State
		switch m.State {
		case command.StateUnknown:
			why = "this agent holds no such movement"
		case "purged":
			why = purged
		}
		fmt.Fprintf(w, "not found: %s (%s)\n", m.Key, why)
	}
}
