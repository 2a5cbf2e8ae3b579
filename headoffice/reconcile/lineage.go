package reconcile

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rxedge/agent/central"
)

// A store's data files (central.HeaderFile). A file that continues after
// another (a replaced PC's new file, a restored copy) says so on its
// movements (central.HeaderFilePrev, HeaderFileBase, HeaderFileOrigin):
// the reconciliation reports each such change as its own finding, and the
// sequences the earlier file gave that never reached central (above its
// highest archived, up to the base the new file continued past) as lost
// with that file, not as an unexplained gap. Lost sequences still make
// the store need attention: the headers are the store's word, and they
// only name a loss, they never hide one.

// Finding origins.
const (
	FileReplaced = "replaced"
	FileRestored = "restored"
)

// maxFilesPerStore bounds the files remembered per store: a store sets
// its own headers.
const maxFilesPerStore = 64

// fileSeen is what the archive holds of one data file of a store.
type fileSeen struct {
	id        string
	low, high uint64
	firstAt   time.Time // enqueue time of its lowest sequence
	prev      string
	base      uint64
	origin    string
}

// seeFile adds record r of file f to t.
func (t *tally) seeFile(f central.FileLineage, r record) {
	if t.files == nil {
		t.files = map[string]*fileSeen{}
	}
	fs := t.files[f.ID]
	if fs == nil {
		if len(t.files) >= maxFilesPerStore {
			t.tooManyFiles = true
			return
		}
		fs = &fileSeen{id: f.ID, low: r.seq}
		t.files[f.ID] = fs
		fs.firstAt = r.enqueuedAt
	}
	if r.seq < fs.low {
		fs.low, fs.firstAt = r.seq, r.enqueuedAt
	}
	fs.high = max(fs.high, r.seq)
	if f.Continues() && fs.origin == "" && (f.Origin == FileReplaced || f.Origin == FileRestored) {
		fs.prev, fs.base, fs.origin = f.Prev, f.Base, f.Origin
	}
}

// FileFinding is one change of a store's data file.
type FileFinding struct {
	Origin string `json:"origin"` // replaced or restored
	Prev   string `json:"prev_file"`
	File   string `json:"file"`
	// At is when the new file's first archived movement was enqueued.
	At *time.Time `json:"at,omitempty"`
	// Base is the sequence the new file continued past; PrevHighest the
	// highest sequence of the earlier file in the archive.
	Base        uint64 `json:"base"`
	PrevHighest uint64 `json:"prev_highest"`
	// Lost is the sequences the earlier file gave that never reached
	// central; nil when none.
	Lost *Range `json:"lost,omitempty"`
}

func (f FileFinding) String() string {
	at := ""
	if f.At != nil {
		at = " at " + f.At.UTC().Format(time.RFC3339)
	}
	prev := f.Prev
	if prev == "" {
		prev = "(a file without identity)"
	}
	var b strings.Builder
	switch f.Origin {
	case FileRestored:
		fmt.Fprintf(&b, "file %s restored from an older copy as file %s%s; continues after sequence %d", prev, f.File, at, f.Base)
	default:
		fmt.Fprintf(&b, "file %s replaced by file %s%s; continues after sequence %d", prev, f.File, at, f.Base)
	}
	if f.Lost != nil {
		fmt.Fprintf(&b, "; sequences %d..%d of %s never reached central (%d lost)", f.Lost.From, f.Lost.To, prev, f.Lost.Len())
	}
	return b.String()
}

// fileFindings works out a store's changes of data file and removes the
// sequences lost with a file from gaps; it returns the findings, the gaps
// left and the number of sequences lost.
func fileFindings(t *tally, gaps []Range) ([]FileFinding, []Range, uint64) {
	if t == nil || len(t.files) == 0 {
		return nil, gaps, 0
	}
	var out []FileFinding
	var lost uint64
	ids := make([]string, 0, len(t.files))
	for id := range t.files {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fs := t.files[id]
		if fs.origin == "" {
			continue
		}
		f := FileFinding{Origin: fs.origin, Prev: fs.prev, File: fs.id, Base: fs.base}
		if !fs.firstAt.IsZero() {
			at := fs.firstAt.UTC()
			f.At = &at
		}
		if p := t.files[fs.prev]; p != nil {
			f.PrevHighest = p.high
		}
		if fs.base > f.PrevHighest {
			r := Range{f.PrevHighest + 1, fs.base}
			var removed uint64
			gaps, removed = subtract(gaps, r)
			if removed > 0 {
				f.Lost = &r
				lost += removed
			}
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b FileFinding) int { return cmp.Compare(a.Base, b.Base) })
	return out, gaps, lost
}

// subtract removes r from gaps, returning what is left and how many
// sequences were removed.
func subtract(gaps []Range, r Range) ([]Range, uint64) {
	var out []Range
	var removed uint64
	for _, g := range gaps {
		if g.To < r.From || g.From > r.To {
			out = append(out, g)
			continue
		}
		lo, hi := max(g.From, r.From), min(g.To, r.To)
		removed += hi - lo + 1
		if g.From < lo {
			out = append(out, Range{g.From, lo - 1})
		}
		if g.To > hi {
			out = append(out, Range{hi + 1, g.To})
		}
	}
	return out, removed
}
