package status

import (
	"fmt"
	"strings"
	"time"
)

// States of the start-up lineage check (LineageCheck.State).
const (
	LineageWaiting = "waiting" // no connection to central yet, or the last read failed (Error)
	LineageDone    = "done"    // the file's sequences are confirmed against central's record
	LineageHeld    = "held"    // a data file this one does not know gives the store's sequences
)

// LineageCheck is what the running agent's check of its data file against
// central's record of the store found at this start (see docs/store.md, Data
// file lineage).
type LineageCheck struct {
	State string     `json:"state"`
	At    *time.Time `json:"at,omitempty"` // when it was decided
	// From names the record the file was checked against: summary (the
	// store's fleet summary), movement or checkpoint (the last message on
	// its subjects), or none (nothing the store could take as its own:
	// the file started as a new file would).
	From           string `json:"from,omitempty"`
	CentralHighest uint64 `json:"central_highest,omitempty"`
	// Skipped counts the records on the store's movement subjects and its
	// fleet key that the check passed over because the store did not
	// write them as it writes its own; SkippedRecords says which.
	Skipped        int             `json:"skipped"`
	SkippedRecords []SkippedRecord `json:"skipped_records,omitempty"`
	// UnverifiedFile is a data file this one does not know that only a
	// record the store cannot trust names: reported, never held.
	UnverifiedFile string `json:"unverified_file_id,omitempty"`
	// Attempts counts the reads of central while waiting; Error is why
	// the last failed.
	Attempts int    `json:"attempts,omitempty"`
	Error    string `json:"error,omitempty"`
}

// SkippedRecord is one record the lineage check passed over: where it was,
// why, and where central holds it (nats stream get <stream> <seq>). What
// the record says is never shown: anyone who could write it chose it.
type SkippedRecord struct {
	Where     string `json:"where"` // last_movement or summary
	Reason    string `json:"reason"`
	Stream    string `json:"stream,omitempty"`
	StreamSeq uint64 `json:"stream_seq,omitempty"`
}

// String is the record in words.
func (r SkippedRecord) String() string {
	s := strings.ReplaceAll(r.Where, "_", " ") + ": " + strings.ReplaceAll(r.Reason, "_", " ")
	if r.Stream != "" {
		s += fmt.Sprintf(", %s #%d", r.Stream, r.StreamSeq)
	}
	return s
}

// skippedText lists the skipped records in words.
func (c *LineageCheck) skippedText() string {
	parts := make([]string, len(c.SkippedRecords))
	for i, r := range c.SkippedRecords {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}

// renderLineage writes the data file's lineage and, in a running agent,
// its check against central at this start.
func renderLineage(b *strings.Builder, s *Status) {
	l := s.DataFile.Lineage
	if l == nil {
		return
	}
	fmt.Fprintf(b, "Lineage         file %s (%s)", l.FileID, l.Origin)
	if l.Base > 0 {
		fmt.Fprintf(b, ", continues after sequence %d", l.Base)
	}
	b.WriteString("\n")
	c := l.Check
	if c == nil {
		return
	}
	switch c.State {
	case LineageWaiting:
		fmt.Fprintf(b, "Lineage check   waiting for central's record (%d reads)", c.Attempts)
		if c.Error != "" {
			b.WriteString(": " + c.Error)
		}
	case LineageHeld:
		b.WriteString("Lineage check   held: another data file gives the store's sequences")
	default:
		fmt.Fprintf(b, "Lineage check   done, from %s (central's highest %d)", c.From, c.CentralHighest)
	}
	if c.Skipped > 0 {
		fmt.Fprintf(b, ", %d record(s) skipped: %s", c.Skipped, c.skippedText())
	}
	b.WriteString("\n")
}

// judgeLineage adds the problems of the start-up lineage check.
func judgeLineage(s *Status, add func(critical bool, code, format string, args ...any)) {
	l := s.DataFile.Lineage
	if l == nil || l.Check == nil {
		return
	}
	c := l.Check
	if c.Skipped > 0 {
		decided := "it decided from the store's " + c.From
		if c.From == "none" {
			decided = "it found nothing it could take as the store's own and started as a new file would"
		}
		add(false, CodeLineageSkipped, "at start the agent passed over %d record(s) on central that the store did not write (%s): someone else wrote on the store's subjects; %s, and delivers as usual (docs/store.md, Data file lineage)", c.Skipped, c.skippedText(), decided)
	}
	if c.UnverifiedFile != "" {
		add(false, CodeFileUnverified, "central's last movement names data file %s, which this data file (%s) does not know, and neither the store's fleet summary nor a checkpoint it signed confirms it: delivery goes on; if another PC runs as this store, switch it off: two data files would give the same sequences", c.UnverifiedFile, l.FileID)
	}
}
