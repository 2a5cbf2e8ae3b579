package lineage

import "github.com/rxedge/agent/queue"

// MaxLead is how far the last movement's sequence may lead the store's own
// fleet summary before it is taken for a forgery rather than movements
// the store gave after its last summary. A store writes its summary with
// every heartbeat (30 s by default); in that time it cannot deliver more
// than central stores, about 50,000 movements a second in atomic batches,
// so 2^24 (16.7 million) is more than five minutes at central's full rate,
// ten heartbeat intervals, and years of a busy pharmacy's movements.
const MaxLead = 1 << 24

// MaxStart is the highest sequence a data file that gave none before this
// start (a new file: a replaced PC) takes from a record it cannot verify.
// Such a file has no sequence of its own to hold a claim against, so the
// bound is absolute: 2^40 is more than a trillion movements, beyond any
// store, and far enough below queue.MaxSeq (2^53) that a file which
// continues after it gives sequences every reader still takes for the
// store's own for as long as any store runs.
const MaxStart = 1 << 40

// Where the record a file continued after came from.
const (
	FromNone       = "none"       // nothing the store could take: the file starts as a new file would
	FromSummary    = "summary"    // the store's own fleet summary
	FromMovement   = "movement"   // the last movement central stored
	FromCheckpoint = "checkpoint" // the last message central stored, a checkpoint of the store's
)

// Evidence is everything the check decides from: what the data file knows
// of itself and what central's records say.
type Evidence struct {
	File    queue.Lineage
	Last    Claim
	Summary Claim
}

// Verdict is what the check does with the evidence.
type Verdict struct {
	// Record is what the data file is told of central (queue.Confirm).
	Record queue.CentralRecord
	// From names the record Record.Highest came from (From…).
	From string
	// Skipped are the records passed over, each with why.
	Skipped []Claim
	// Behind is true when the file continues after Record (replaced or
	// restored).
	Behind bool
	// Hold is true when a data file this one does not know gave the
	// store's newest sequence, corroborated: nothing is sent until an
	// operator decides.
	Hold bool
	// Unverified names a data file this one does not know that only an
	// unverified record names ("" when none): reported, never held.
	Unverified string
}

// Decide says what a data file does with central's record of its store.
//
// A record the store cannot take as its own was skipped when it was read.
// The store trusts its own fleet summary (only its identity writes its
// key, and a copy of another's is skipped) and a checkpoint signed with
// its own key. A movement or checkpoint whose headers agree with each
// other and with the store is taken at its word for its sequence, which
// can only move the file's sequences forward; it names a data file that
// holds this one (a cloned PC) only when the summary names that file too.
// The higher claim wins, the trusted one on a tie; with none, the file
// starts as a new file would.
//
// Only a signed checkpoint is beyond forgery: the store's own credentials
// write its summary and its movements, so a claim that is not signed moves
// the file's sequences only as far as a store could have given them
// (implausible): a claim farther is skipped as SkipImplausible, and the
// check decides from what is left.
func Decide(e Evidence) Verdict {
	last, sum := e.Last, e.Summary
	v := Verdict{From: FromNone}
	trustedSum := sum.Found == FoundSummary
	lastOK := last.Found == FoundMovement || last.Found == FoundCheckpoint
	lastBad := lastOK && implausible(last, e.File, sum, trustedSum)
	sumBad := trustedSum && implausible(sum, e.File, last, lastOK)
	if lastBad {
		last, lastOK = last.skip(SkipImplausible), false
	}
	if sumBad {
		sum, trustedSum = sum.skip(SkipImplausible), false
	}
	for _, c := range []Claim{last, sum} {
		if c.Found == FoundSkipped {
			v.Skipped = append(v.Skipped, c)
		}
	}
	if trustedSum {
		v.From, v.Record = FromSummary, queue.CentralRecord{Highest: sum.Seq, FileID: sum.File}
	}
	if lastOK && (!trustedSum || last.Seq > sum.Seq) {
		v.From = FromMovement
		if last.Found == FoundCheckpoint {
			v.From = FromCheckpoint
		}
		corroborated := last.Signed || trustedSum && last.File == sum.File
		v.Record = queue.CentralRecord{Highest: last.Seq, FileID: last.File, Unverified: !corroborated}
	}
	if v.From == FromNone {
		v.Record.Unverified = true
	}
	v.Behind = e.File.Fence != 0 && v.Record.Highest >= e.File.Fence
	if !v.Behind && !e.File.Knows(v.Record.FileID) {
		if v.Record.Unverified {
			v.Unverified = v.Record.FileID
		} else {
			v.Hold = true
		}
	}
	return v
}

// implausible reports whether claim c, which is not signed, is farther
// than a store gives its sequences: more than MaxLead past the last
// sequence the data file gave before this start, or past the other claim
// (found, when otherOK); or, for a file that gave none, past MaxStart.
// Without this bound one forged summary or movement moved the store to
// the top of its range, where its own records are out of range and a
// replacement PC, finding nothing it could take, gave its sequences again.
func implausible(c Claim, file queue.Lineage, other Claim, otherOK bool) bool {
	if c.Signed {
		return false
	}
	ahead := func(ref uint64) bool { return c.Seq > ref && c.Seq-ref > MaxLead }
	if file.Fence > 1 && ahead(file.Fence-1) {
		return true
	}
	if otherOK && ahead(other.Seq) {
		return true
	}
	return file.Fence <= 1 && c.Seq > MaxStart
}
