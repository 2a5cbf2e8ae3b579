package audit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
)

// plan is what a pass reads of each archive, and what it keeps of each
// for the next pass.
type plan struct {
	names []string
	ends  lastSeqs          // each archive's last sequence when the pass began
	from  map[string]uint64 // the first sequence the pass reads (0: the start)
	docs  map[string]streamDoc
	total uint64
	msgs  map[string]uint64 // each archive's records when the pass began
	// reset: an archive changed below what was verified, so every log is
	// verified again from its anchor, every archive from its start.
	reset bool
	// minAge is the shortest max_age among the archives (0: none).
	minAge  time.Duration
	witness *streamDoc
	// gone are the archives of the state that no longer exist: reported
	// once, and not kept.
	gone []string
}

// planArchives looks at each archive before the read: where the last pass left
// it, and whether anything below that changed (changed).
func (v *verifier) planArchives(ctx context.Context, names []string) (*plan, error) {
	p := &plan{names: names, ends: lastSeqs{}, from: map[string]uint64{}, docs: map[string]streamDoc{}, msgs: map[string]uint64{}}
	for _, name := range names {
		st, err := v.js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("audit: stream %s: %w", name, err)
		}
		info := st.CachedInfo()
		age := info.Config.MaxAge
		if age > 0 && (p.minAge == 0 || age < p.minAge) {
			p.minAge = age
		}
		p.ends[name], p.msgs[name] = info.State.LastSeq, info.State.Msgs
		doc := streamDoc{Created: info.Created, First: info.State.FirstSeq, Last: info.State.LastSeq, Deleted: uint64(info.State.NumDeleted), MaxAge: age}
		prev, seen := v.savedStream(name)
		if !seen {
			p.docs[name], p.total = doc, p.total+info.State.Msgs
			continue
		}
		doc.Marks, doc.PrintSeq, doc.Print = prev.Marks, prev.PrintSeq, prev.Print
		p.docs[name] = doc
		why, reset, err := v.changed(ctx, name, info, prev)
		if err != nil {
			return nil, err
		}
		if why != "" {
			v.find(Finding{Kind: KindArchiveRewritten, Stream: name, Detail: why})
		}
		p.reset = p.reset || reset
		p.from[name] = prev.Last + 1
		p.total += info.State.LastSeq - min(prev.Last, info.State.LastSeq)
	}
	if v.saved != nil {
		for _, name := range slices.Sorted(maps.Keys(v.saved.Streams)) {
			if !slices.Contains(names, name) && (v.o.Archives == nil || slices.Contains(v.o.Archives, name)) {
				v.find(Finding{Kind: KindArchiveRewritten, Stream: name, Detail: fmt.Sprintf("the archive, verified up to sequence %d, no longer exists", v.saved.Streams[name].Last)})
				p.reset, p.gone = true, append(p.gone, name)
			}
		}
	}
	if p.reset {
		v.startAgain(p)
	}
	return p, nil
}

// startAgain reads every archive from its start and verifies every log
// again from its anchor, against what was verified before.
func (v *verifier) startAgain(p *plan) {
	p.total = 0
	for _, name := range p.names {
		p.from[name] = 0
		d := p.docs[name]
		d.Marks, d.PrintSeq, d.Print = nil, 0, nil
		p.docs[name] = d
		p.total += p.msgs[name]
	}
	for _, st := range v.stores {
		st.before, st.orphans, st.dropped = span{}, nil, 0
		for _, lg := range st.order {
			lg.restart()
		}
	}
	if v.saved != nil {
		v.saved.Recheck = nil
	}
	v.note("an archive changed below what was verified: every log is verified again from the start of its tree, against what was verified before")
}

func (v *verifier) savedStream(name string) (streamDoc, bool) {
	if v.saved == nil {
		return streamDoc{}, false
	}
	d, ok := v.saved.Streams[name]
	return d, ok
}

// changed says what changed in an archive below what the last pass
// verified, and whether the logs must be verified again: created again,
// shorter, records deleted (none may be: an archive denies deletes), the
// first sequence moved other than by its max_age (records the last pass
// saw younger than the max_age are gone), its max_age shortened, or the
// last record verified read back different. Records aged out by the
// max_age are not a finding; the report says how many.
func (v *verifier) changed(ctx context.Context, name string, info *jetstream.StreamInfo, prev streamDoc) (string, bool, error) {
	cur, age := info.State, info.Config.MaxAge
	switch {
	case !info.Created.Equal(prev.Created):
		return fmt.Sprintf("the archive was created again at %s (the one verified up to sequence %d was created at %s)",
			info.Created.UTC().Format(time.RFC3339), prev.Last, prev.Created.UTC().Format(time.RFC3339)), true, nil
	case cur.LastSeq < prev.Last:
		return fmt.Sprintf("it ends at sequence %d, before sequence %d, which was verified", cur.LastSeq, prev.Last), true, nil
	case cur.FirstSeq < prev.First:
		return fmt.Sprintf("it starts at sequence %d, before sequence %d, where it started", cur.FirstSeq, prev.First), true, nil
	case uint64(cur.NumDeleted) > prev.Deleted:
		return fmt.Sprintf("%d of its records were deleted (%d deleted now, %d before)", uint64(cur.NumDeleted)-prev.Deleted, cur.NumDeleted, prev.Deleted), true, nil
	case cur.FirstSeq > prev.First:
		if why := notAgedOut(prev, cur.FirstSeq, age, v.o.Now()); why != "" {
			return why, true, nil
		}
		v.note(fmt.Sprintf("archive %s: sequences %d-%d aged out (its max_age is %s)", name, prev.First, cur.FirstSeq-1, age))
	}
	if prev.MaxAge == 0 && age > 0 || age > 0 && age < prev.MaxAge {
		return fmt.Sprintf("its max_age was shortened from %s to %s: records it deletes for it are not aged out", ageText(prev.MaxAge), ageText(age)), false, nil
	}
	if prev.PrintSeq == 0 || prev.PrintSeq < cur.FirstSeq {
		return "", false, nil
	}
	same, err := v.samePrint(ctx, name, prev)
	if err != nil || same {
		return "", false, err
	}
	return fmt.Sprintf("its record at sequence %d, verified before, reads back different or is gone", prev.PrintSeq), true, nil
}

func ageText(d time.Duration) string {
	if d == 0 {
		return "none (for ever)"
	}
	return d.String()
}

// notAgedOut says why an archive's first sequence moving to first is not
// its max_age expiring old records: it keeps records for ever, or a record
// below first that a pass saw (Marks) was stored more recently than the
// max_age keeps records, by more than a slack for the clocks of head
// office and central. Between two marks a removal stays unseen; the
// marks are one a pass, the older ones thinned.
func notAgedOut(prev streamDoc, first uint64, age time.Duration, now time.Time) string {
	if age <= 0 {
		return fmt.Sprintf("its first sequence moved from %d to %d, and it keeps records for ever: records were removed", prev.First, first)
	}
	edge := now.Add(-age).Add(min(10*time.Minute, age/10))
	for _, m := range prev.Marks {
		if m.Seq < first && m.At.After(edge) {
			return fmt.Sprintf("its first sequence moved from %d to %d, past sequence %d, stored %s ago, which its max_age of %s keeps: records were removed, not aged out",
				prev.First, first, m.Seq, now.Sub(m.At).Round(time.Second), age)
		}
	}
	return ""
}

// samePrint reads the archive's record at the last pass's last sequence
// and compares it with what that pass read there.
func (v *verifier) samePrint(ctx context.Context, name string, prev streamDoc) (bool, error) {
	var got []byte
	var at uint64
	_, err := scanStream(ctx, v.js, scanSpec{stream: name, prefix: central.ArchivePrefix, from: prev.PrintSeq, last: prev.PrintSeq, max: 1}, func(r record) error {
		got, at = fingerprint(r), r.streamSeq
		return nil
	}, nil)
	if err != nil {
		return false, err
	}
	return at == prev.PrintSeq && string(got) == string(prev.Print), nil
}

// fingerprint is a record's SHA-256 over its sequence, the time it was
// stored, its store, its headers and its payload: what a record read
// again must give.
func fingerprint(r record) []byte {
	h := sha256.New()
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], r.streamSeq)
	binary.BigEndian.PutUint64(b[8:], uint64(r.at.UnixNano()))
	h.Write(b[:])
	h.Write([]byte(r.store + "\x00"))
	for _, k := range slices.Sorted(maps.Keys(r.h)) {
		for _, x := range r.h[k] {
			h.Write([]byte(k + "\x00" + x + "\x00"))
		}
	}
	h.Write(r.data)
	return h.Sum(nil)
}

// read reads each archive once, whole, from where the plan says, and
// keeps what the next pass needs of it: its last record's fingerprint and
// a mark of the sequence and time it reached.
func (v *verifier) read(ctx context.Context, p *plan) error {
	var subjects []string
	for _, s := range v.o.Stores {
		subjects = append(subjects, central.ArchiveSubject(s))
	}
	prog := v.progress(ReadArchive, p.total)
	for i, name := range p.names {
		var last record
		got := false
		n, err := scanStream(ctx, v.js, scanSpec{stream: name, prefix: central.ArchivePrefix, from: p.from[name], last: p.ends[name], subjects: subjects}, func(r record) error {
			last, got = r, true
			return v.take(ctx, r)
		}, prog(i))
		v.rep.Records += n
		v.rep.Positions = append(v.rep.Positions, Position{Stream: name, From: p.from[name], To: p.ends[name], Records: n})
		if err != nil {
			return err
		}
		if got {
			d := p.docs[name]
			d.PrintSeq, d.Print = last.streamSeq, fingerprint(last)
			d.Marks = addMark(d.Marks, markDoc{Seq: last.streamSeq, At: last.at})
			p.docs[name] = d
		}
	}
	return nil
}

// maxMarks bounds the marks kept per archive: past it, every other of the
// older ones is let go, the newest 16 kept.
const maxMarks = 256

func addMark(marks []markDoc, m markDoc) []markDoc {
	marks = append(marks, m)
	if len(marks) <= maxMarks {
		return marks
	}
	out := make([]markDoc, 0, len(marks))
	old := len(marks) - 16
	for i, x := range marks {
		if i >= old || i%2 == 0 {
			out = append(out, x)
		}
	}
	return out
}

// readWitnessFrom reads the witness stream from where the last pass left
// it (from its start when it was created again or is shorter).
func (v *verifier) readWitnessFrom(ctx context.Context, p *plan) error {
	st, err := v.js.Stream(ctx, v.o.WitnessStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		v.note("the witness stream " + v.o.WitnessStream + " does not exist: no checkpoint is countersigned")
		return nil
	}
	if err != nil {
		return fmt.Errorf("audit: stream %s: %w", v.o.WitnessStream, err)
	}
	info := st.CachedInfo()
	var from uint64
	if v.saved != nil && v.saved.Witness != nil && !p.reset {
		w := v.saved.Witness
		if info.Created.Equal(w.Created) && info.State.LastSeq >= w.Last {
			from = w.Last + 1
		} else {
			v.note("the witness stream " + v.o.WitnessStream + " was created again or holds less than it did: it is read from its start")
		}
	}
	p.witness = &streamDoc{Created: info.Created, First: info.State.FirstSeq, Last: info.State.LastSeq}
	return v.readWitness(ctx, from, info.State.LastSeq)
}

func (v *verifier) progress(read string, total uint64) func(int) func(uint64) {
	var base, done uint64
	lastStream := -1
	return func(stream int) func(uint64) {
		return func(n uint64) {
			if stream != lastStream {
				base, lastStream = done, stream
			}
			done = base + n
			if v.o.Progress != nil {
				v.o.Progress(read, done, total)
			}
		}
	}
}
