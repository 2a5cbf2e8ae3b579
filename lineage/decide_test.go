package lineage_test

import (
	"fmt"
	"testing"

	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/queue"
)

// TestDecide: the check's decision as a table of evidence: which record
// the file is checked against, what is skipped, and when a data file it
// does not know holds it (only when the store's own summary or its signed
// checkpoint names that file) or is only reported.
func TestDecide(t *testing.T) {
	skip := func(where, why string) lineage.Claim {
		return lineage.Claim{Where: where, Found: lineage.FoundSkipped, Skip: why, Stream: "S", StreamSeq: 9}
	}
	unread := lineage.Claim{Where: lineage.WhereSummary, Found: lineage.FoundUnread, Err: "timeout"}

	cases := []decideCase{
		{name: "nothing on central", last: none, sum: none, from: lineage.FromNone, unverified: true},
		{name: "only a record the store did not write", last: skip(lineage.WhereLast, lineage.SkipNoSeq), sum: none, from: lineage.FromNone, unverified: true, skipped: []string{lineage.SkipNoSeq}},
		{name: "nothing trustworthy anywhere", last: skip(lineage.WhereLast, lineage.SkipReflected), sum: skip(lineage.WhereSummary, lineage.SkipNotOwn), from: lineage.FromNone, unverified: true, skipped: []string{lineage.SkipReflected, lineage.SkipNotOwn}},
		{name: "a skipped record: the summary decides", last: skip(lineage.WhereLast, lineage.SkipNoSeq), sum: sum(300, prev), from: lineage.FromSummary, highest: 300, fileID: prev, behind: true, skipped: []string{lineage.SkipNoSeq}},
		{name: "summary, up to date", last: none, sum: sum(100, own), from: lineage.FromSummary, highest: 100, fileID: own},
		{name: "summary unread: the movement decides", last: mv(100, own), sum: unread, from: lineage.FromMovement, highest: 100, fileID: own, unverified: true},
		{name: "summary of a file this one does not know holds", last: mv(80, own), sum: sum(90, x), from: lineage.FromSummary, highest: 90, fileID: x, hold: true},
		{name: "a higher movement of this file wins", last: mv(95, own), sum: sum(90, x), from: lineage.FromMovement, highest: 95, fileID: own, unverified: true},
		{name: "unknown file on the movement only: reported, not held", last: mv(95, x), sum: sum(90, own), from: lineage.FromMovement, highest: 95, fileID: x, unverified: true, reported: x},
		{name: "unknown file with no summary: reported, not held", last: mv(95, x), sum: none, from: lineage.FromMovement, highest: 95, fileID: x, unverified: true, reported: x},
		{name: "unknown file the summary names too: held", last: mv(95, x), sum: sum(90, x), from: lineage.FromMovement, highest: 95, fileID: x, hold: true},
		{name: "unknown file in a checkpoint signed by the store: held", last: cp(95, x, true), sum: sum(90, own), from: lineage.FromCheckpoint, highest: 95, fileID: x, hold: true},
		{name: "unknown file in an unsigned checkpoint: reported", last: cp(95, x, false), sum: sum(90, own), from: lineage.FromCheckpoint, highest: 95, fileID: x, unverified: true, reported: x},
		{name: "an unverified record ahead: continued after", last: mv(500, x), sum: sum(90, own), from: lineage.FromMovement, highest: 500, fileID: x, unverified: true, behind: true},
		{name: "the previous file is known", last: mv(95, prev), sum: sum(90, own), from: lineage.FromMovement, highest: 95, fileID: prev, unverified: true},
		{name: "an accepted file is known", last: mv(95, accepted), sum: none, from: lineage.FromMovement, highest: 95, fileID: accepted, unverified: true},
		{name: "no file named: never foreign", last: mv(95, ""), sum: none, from: lineage.FromMovement, highest: 95, unverified: true},
		{name: "a tie: the summary wins", last: mv(100, x), sum: sum(100, own), from: lineage.FromSummary, highest: 100, fileID: own},
		{name: "MaxLead ahead of the summary", last: mv(90+lineage.MaxLead, own), sum: sum(90, own), from: lineage.FromMovement, highest: 90 + lineage.MaxLead, fileID: own, behind: true},
		{name: "past MaxLead: implausible", last: mv(91+lineage.MaxLead, own), sum: sum(90, own), from: lineage.FromSummary, highest: 90, fileID: own, skipped: []string{lineage.SkipImplausible}},
		{name: "far ahead of a summary of 0", last: mv(1<<40, x), sum: sum(0, ""), from: lineage.FromSummary, skipped: []string{lineage.SkipImplausible}},
		{name: "a signed checkpoint far ahead", last: cp(1<<40, own, true), sum: sum(90, own), from: lineage.FromCheckpoint, highest: 1 << 40, fileID: own, behind: true},
	}
	runDecide(t, cases)
}

const (
	own, prev, accepted = "own-file", "prev-file", "accepted-file"
	x                   = "x-file" // a file this one does not know
)

var (
	file  = queue.Lineage{FileID: own, Prev: prev, Accepted: accepted, Fence: 101}
	fresh = queue.Lineage{FileID: own, Fence: 1} // a new file: a replaced PC
	none  = lineage.Claim{Found: lineage.FoundNone}
)

func mv(seq uint64, f string) lineage.Claim {
	return lineage.Claim{Where: lineage.WhereLast, Found: lineage.FoundMovement, Seq: seq, File: f}
}

func cp(seq uint64, f string, signed bool) lineage.Claim {
	return lineage.Claim{Where: lineage.WhereLast, Found: lineage.FoundCheckpoint, Seq: seq, File: f, Signed: signed}
}

func sum(seq uint64, f string) lineage.Claim {
	return lineage.Claim{Where: lineage.WhereSummary, Found: lineage.FoundSummary, Seq: seq, File: f}
}

// decideCase is a row of the decision's tables.
type decideCase struct {
	name       string
	new        bool // the file is new (fresh), else it gave 1..100 (file)
	last, sum  lineage.Claim
	from       string
	highest    uint64
	fileID     string
	unverified bool     // Record.Unverified
	behind     bool     // continues after the record
	hold       bool     // held for an operator
	reported   string   // Verdict.Unverified
	skipped    []string // the reasons skipped, in order
}

// runDecide runs each case's evidence through Decide.
func runDecide(t *testing.T, cases []decideCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := file
			if tc.new {
				f = fresh
			}
			v := lineage.Decide(lineage.Evidence{File: f, Last: tc.last, Summary: tc.sum})
			whys := []string{}
			for _, s := range v.Skipped {
				whys = append(whys, s.Skip)
			}
			const form = "from %s, record %+v, behind %v, hold %v, reported %q, skipped %q"
			got := fmt.Sprintf(form, v.From, v.Record, v.Behind, v.Hold, v.Unverified, whys)
			want := fmt.Sprintf(form, tc.from, queue.CentralRecord{Highest: tc.highest, FileID: tc.fileID, Unverified: tc.unverified},
				tc.behind, tc.hold, tc.reported, append([]string{}, tc.skipped...))
			if got != want {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// TestDecideBoundsWhatItCannotVerify: no record but a signed checkpoint
// moves the file farther than a store gives its sequences: MaxLead past
// the file's own last sequence or the other record, MaxStart for a new
// file. A forged summary of 2^53 naming the store's own file once moved
// the store out of its range for good.
func TestDecideBoundsWhatItCannotVerify(t *testing.T) {
	runDecide(t, []decideCase{
		{name: "no summary: MaxLead past the file's own", last: mv(100+lineage.MaxLead, x), sum: none, from: lineage.FromMovement, highest: 100 + lineage.MaxLead, fileID: x, unverified: true, behind: true},
		{name: "no summary: past MaxLead beyond the file's own", last: mv(queue.MaxSeq, x), sum: none, from: lineage.FromNone, unverified: true, skipped: []string{lineage.SkipImplausible}},
		{name: "a summary MaxLead past the file's own", last: none, sum: sum(100+lineage.MaxLead, own), from: lineage.FromSummary, highest: 100 + lineage.MaxLead, fileID: own, behind: true},
		{name: "a summary of 2^53 naming this file", last: mv(100, own), sum: sum(queue.MaxSeq, own), from: lineage.FromMovement, highest: 100, fileID: own, unverified: true, skipped: []string{lineage.SkipImplausible}},
		{name: "summary and movement forged alike, far ahead of the file", last: mv(1<<50, own), sum: sum(1<<50, own), from: lineage.FromNone, unverified: true, skipped: []string{lineage.SkipImplausible, lineage.SkipImplausible}},
		{name: "new file: the old file's records", new: true, last: mv(1000, prev), sum: sum(1050, prev), from: lineage.FromSummary, highest: 1050, fileID: prev, behind: true},
		{name: "new file: a summary far past the last movement", new: true, last: mv(1000, prev), sum: sum(queue.MaxSeq, prev), from: lineage.FromMovement, highest: 1000, fileID: prev, unverified: true, behind: true, skipped: []string{lineage.SkipImplausible}},
		{name: "new file: a summary alone up to MaxStart", new: true, last: none, sum: sum(lineage.MaxStart, prev), from: lineage.FromSummary, highest: lineage.MaxStart, fileID: prev, behind: true},
		{name: "new file: a summary alone past MaxStart", new: true, last: none, sum: sum(lineage.MaxStart+1, prev), from: lineage.FromNone, unverified: true, skipped: []string{lineage.SkipImplausible}},
		{name: "new file: both forged alike past MaxStart", new: true, last: mv(queue.MaxSeq, prev), sum: sum(queue.MaxSeq, prev), from: lineage.FromNone, unverified: true, skipped: []string{lineage.SkipImplausible, lineage.SkipImplausible}},
		{name: "new file: a signed checkpoint past MaxStart", new: true, last: cp(1<<45, own, true), sum: none, from: lineage.FromCheckpoint, highest: 1 << 45, fileID: own, behind: true},
	})
}
