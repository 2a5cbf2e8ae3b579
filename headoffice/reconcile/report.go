package reconcile

import (
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable writes the report for people: one line per store with
// something to say, a total line, then what is unexplained, store by
// store.
func WriteTable(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STORE\tHIGHEST\tHELD\tMISSING\tEXPLAINED\tUNEXPLAINED\tREPEATS\tCONFLICTS\tREUSED\tMALFORMED\t")
	row := func(s *StoreReport) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", s.Store, s.Highest, s.Held, s.Missing, s.ExplainedCount(), s.UnexplainedCount(), s.Repeats, s.Conflicts, s.SeqReused, s.Malformed)
	}
	shown := 0
	for i := range r.Stores {
		if r.Stores[i].Noteworthy() {
			row(&r.Stores[i])
			shown++
		}
	}
	row(&r.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d store(s), %d with something to say; %d archive records read in %.1fs (%.0f records/s)\n",
		len(r.Stores), shown, r.Records, r.ReadSeconds, r.RecordsPerSecond)
	if r.RereadStores > 0 {
		fmt.Fprintf(&b, "Read again the %d store(s) with a key or a sequence that may be archived twice: %d records in %.1fs.\n", r.RereadStores, r.RereadRecords, r.RereadSeconds)
	}
	if r.Since != nil {
		fmt.Fprintf(&b, "Archive read since %s: each store checked from its first sequence enqueued since then.\n", r.Since.Format("2006-01-02 15:04:05Z07:00"))
	}
	if len(r.Total.Explained) > 0 {
		fmt.Fprintf(&b, "Explained: %s\n", counts(r.Total.Explained))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "Note: %s\n", n)
	}
	var attention []string
	for i := range r.Stores {
		s := &r.Stores[i]
		for _, n := range s.Notes {
			attention = append(attention, fmt.Sprintf("%s: %s", s.Store, n))
		}
		for _, f := range s.Files {
			attention = append(attention, fmt.Sprintf("%s: %s", s.Store, f))
		}
		if s.OK() {
			continue
		}
		if len(s.Unexplained) > 0 {
			attention = append(attention, fmt.Sprintf("%s: %d missing unexplained (%s)", s.Store, s.UnexplainedCount(), counts(s.Unexplained)))
			for _, g := range s.Gaps {
				if !g.Explained {
					attention = append(attention, "    "+g.String())
				}
			}
			if s.MoreGaps > 0 {
				attention = append(attention, fmt.Sprintf("    and %d more run(s) (see --json)", s.MoreGaps))
			}
		}
		if s.Conflicts > 0 {
			attention = append(attention, fmt.Sprintf("%s: %d key(s) archived with two contents: %s", s.Store, s.Conflicts, strings.Join(s.ConflictKeys, ", ")))
		}
		if s.SeqReused > 0 {
			attention = append(attention, fmt.Sprintf("%s: %d sequence(s) archived for two keys (a data file restored or replaced?)", s.Store, s.SeqReused))
		}
		if s.Malformed > 0 {
			attention = append(attention, fmt.Sprintf("%s: %d archive record(s) without a usable Rx-Seq, key or digest, or naming another store", s.Store, s.Malformed))
		}
	}
	if len(attention) > 0 {
		b.WriteString("\nNeeds attention:\n")
		for _, a := range attention {
			b.WriteString("  " + a + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String is the gap in words: "12-14 synced_not_archived".
func (g Gap) String() string {
	s := strconv.FormatUint(g.From, 10)
	if g.To != g.From {
		s += "-" + strconv.FormatUint(g.To, 10)
	}
	s += " " + g.Why
	if g.Reason != "" {
		s += " (" + g.Reason + ")"
	}
	return s
}

func counts(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// csvWhy are the columns of WriteCSV for each explanation.
var csvWhy = []string{
	ExplainedPending, ExplainedQuarantined, ExplainedPurged, ExplainedInTransit,
	UnexplainedSynced, UnexplainedPruned, UnexplainedNotAssigned, UnexplainedNoAnswer, UnexplainedRefused, UnexplainedBadAnswer, UnexplainedNotAsked,
}

// WriteCSV writes one row per store, every store, then the total row.
func WriteCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	head := []string{"store", "ok", "highest", "checked_from", "checked_to", "held", "records", "missing"}
	head = append(head, csvWhy...)
	head = append(head, "repeats", "conflicts", "seq_reused", "malformed")
	if err := cw.Write(head); err != nil {
		return err
	}
	row := func(s *StoreReport) error {
		u := func(v uint64) string { return strconv.FormatUint(v, 10) }
		from, to := "", ""
		if s.Checked != nil {
			from, to = u(s.Checked.From), u(s.Checked.To)
		}
		rec := []string{s.Store, strconv.FormatBool(s.OK()), u(s.Highest), from, to, u(s.Held), u(s.Records), u(s.Missing)}
		for _, k := range csvWhy {
			rec = append(rec, u(s.Explained[k]+s.Unexplained[k]))
		}
		rec = append(rec, u(s.Repeats), u(s.Conflicts), u(s.SeqReused), u(s.Malformed))
		return cw.Write(rec)
	}
	for i := range r.Stores {
		if err := row(&r.Stores[i]); err != nil {
			return err
		}
	}
	if err := row(&r.Total); err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}
