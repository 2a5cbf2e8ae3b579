package queue

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A data file's lineage (DESIGN P9: a store sequence is never given to two
// movements, whatever happens to the store's PC).
//
// Every data file has an identity, a random UUID given when the file is
// created in the same transaction that writes its schema (or, for a file
// of schema 1, by the migration to schema 2 at its first open). Central
// receives it with every movement (central.HeaderFile), so a store's
// record says which file gave each sequence.
//
// A file cannot know at start whether it is still the newest of its store:
// the PC may have been replaced (a new, empty file), or the file restored
// from a backup or a rolled-back snapshot (an older copy). Each open with
// Options.Lineage therefore sets a fence, the first sequence the file
// gives from this start on, and holds back every movement from the fence
// on (Lease, NextDue and DueCount do not see them) until Confirm has been
// told what central holds for the store. Movements are still accepted and
// acknowledged as always (P3: the agent starts with no network); only
// their sending waits. If central holds the store's sequences up to C and
// C reaches the fence, the file is behind central: the movements held back
// are given the sequences after C (they were never sent, so nobody else
// knows their old ones) and the file continues past C. A file that had
// given sequences before (it synced or held movements) is then a restored
// copy; a new one is a replacement of the file central knew. Either way
// the file records its predecessor and the sequence it continued past, and
// sends both with its movements, so that head office's reconciliation can
// tell a replaced or restored file from an unexplained gap.

// Lineage origins.
const (
	OriginNew      = "new"      // created empty
	OriginMigrated = "migrated" // an existing file given its identity by the schema 2 migration
	OriginReplaced = "replaced" // a new file that continues after another file central knew
	OriginRestored = "restored" // an older copy of a file (a backup, a rolled-back snapshot) that continues after central's record
	OriginAdopted  = "adopted"  // a file an operator adopted (agent data adopt)
)

// ActionLineage is the journal action of a change of the file's lineage:
// its identity given, a replacement or restore found, an adoption.
const ActionLineage = "lineage"

var (
	metaFileID     = []byte("file_id")
	metaFileOrigin = []byte("file_origin")
	metaFilePrev   = []byte("file_prev")
	metaFileBase   = []byte("file_base")
	metaFileAt     = []byte("file_lineage_at")
	metaFence      = []byte("fence_seq")
	metaRestored   = []byte("restored_at")
	metaForeign    = []byte("foreign_file")
	metaAccepted   = []byte("accepted_file")
)

// Lineage is what a data file knows of where it comes from.
type Lineage struct {
	FileID string    // this file's identity
	Origin string    // one of the Origin… constants
	Prev   string    // the file this one continues after, when known
	Base   uint64    // the sequence this file continued past (0: from the start)
	At     time.Time // when the origin was decided
	// Fence is the first sequence held back until Confirm (0 when the file
	// is confirmed since this start).
	Fence uint64
	// RestoredAt is when this file was found to be an older copy of
	// itself, zero when never.
	RestoredAt time.Time
	// Foreign is the file central's record names that this file does not
	// know ("" when none): another data file gives the store's sequences.
	// The file sends nothing until an operator decides (agent data).
	Foreign string
	// Accepted is a file central's record named that an operator accepted
	// as the store's (agent data adopt), "" when none: it is no longer
	// foreign to this file.
	Accepted string
}

// Knows reports whether id is a data file this file does not take for
// another giving the store's sequences: itself, the file it continued
// after, one an operator accepted, or none named ("", movements sent
// before files had identities).
func (l Lineage) Knows(id string) bool {
	return id == "" || id == l.FileID || id == l.Prev || id == l.Accepted
}

// Confirmed reports whether the file's sequences since its start were
// checked against central's record.
func (l Lineage) Confirmed() bool { return l.Fence == 0 }

// CentralRecord is what central holds for a store, as an agent can read it.
type CentralRecord struct {
	// Highest is the highest sequence central knows the store gave (0 when
	// it holds nothing for the store).
	Highest uint64
	// FileID is the identity of the file that gave Highest, when central
	// says ("" for movements sent before files had identities).
	FileID string
	// Unverified says that FileID comes from a record nothing the store
	// can trust corroborates (package lineage decides): the file may
	// continue after it and name it as its predecessor, but a FileID this
	// file does not know never holds it as foreign.
	Unverified bool
}

// MaxSeq is the highest store sequence a file takes from central's
// record: far beyond any store's (2^53, ten movements a second for 28
// million years), the largest integer every JSON reader keeps exact, and
// low enough that continuing after it cannot overflow.
const MaxSeq = 1 << 53

// ErrSeqRange is a central record above MaxSeq given to Confirm.
var ErrSeqRange = errors.New("queue: central's record of the store is above the highest sequence a store gives")

// Confirmation is what Confirm found.
type Confirmation struct {
	Lineage
	// Behind is true when the file was behind central: a replacement or a
	// restored copy.
	Behind bool
	// Renumbered counts the movements held back that were given new
	// sequences after central's highest.
	Renumbered int
	// From and To are the first and last sequence renumbered movements had
	// before (0 when none).
	From, To uint64
}

// migrateIdentity is the migration from schema 1 to 2: the file gets its
// identity, journalled.
func migrateIdentity(now func() time.Time) Migration {
	return Migration{From: 1, Up: func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta.Get(metaFileID) != nil {
			return nil
		}
		id, err := newFileID()
		if err != nil {
			return err
		}
		at := now()
		if err := putLineage(meta, id, OriginMigrated, "", 0, at); err != nil {
			return err
		}
		return appendEvents(tx, Event{At: at, Action: ActionLineage, Actor: ActorAgent,
			Reason: "the data file was given its identity (schema 2)",
			Detail: map[string]string{"file": id, "origin": OriginMigrated, "last_seq": strconv.FormatUint(getU64(meta, metaNextSeq), 10)}})
	}}
}

func putLineage(meta *bolt.Bucket, id, origin, prev string, base uint64, at time.Time) error {
	for _, kv := range []struct {
		k []byte
		v []byte
	}{
		{metaFileID, []byte(id)},
		{metaFileOrigin, []byte(origin)},
		{metaFilePrev, []byte(prev)},
		{metaFileBase, u64(base)},
		{metaFileAt, u64(uint64(at.UnixNano()))},
	} {
		if err := meta.Put(kv.k, kv.v); err != nil {
			return err
		}
	}
	return nil
}

func readLineage(meta *bolt.Bucket) Lineage {
	l := Lineage{
		FileID: string(meta.Get(metaFileID)),
		Origin: string(meta.Get(metaFileOrigin)),
		Prev:   string(meta.Get(metaFilePrev)),
		Base:   getU64(meta, metaFileBase),
		Fence:  getU64(meta, metaFence),
	}
	if v := getU64(meta, metaFileAt); v != 0 {
		l.At = time.Unix(0, int64(v)).UTC()
	}
	if v := getU64(meta, metaRestored); v != 0 {
		l.RestoredAt = time.Unix(0, int64(v)).UTC()
	}
	l.Foreign = string(meta.Get(metaForeign))
	l.Accepted = string(meta.Get(metaAccepted))
	return l
}

// setFence holds back, until Confirm, every sequence the file gives from
// now on, unless an earlier start's fence is still standing.
func setFence(meta *bolt.Bucket) error {
	if getU64(meta, metaFence) != 0 {
		return nil
	}
	return meta.Put(metaFence, u64(getU64(meta, metaNextSeq)+1))
}

// Lineage is the file's lineage, read from memory (it changes only
// through Confirm and Adopt, which update it).
func (q *Queue) Lineage() Lineage {
	q.leaseMu.Lock()
	defer q.leaseMu.Unlock()
	return q.lineage
}

// held reports whether seq waits for Confirm. Callers hold leaseMu.
func (q *Queue) held(seq uint64) bool {
	return q.lineage.Fence != 0 && seq >= q.lineage.Fence
}

// Confirm applies central's record of the store to the file, in one
// transaction: when the file is behind central (rec.Highest reaches its
// fence), the movements held back are given the sequences after
// rec.Highest and the file continues after it, recording rec.FileID as its
// predecessor; either way the fence is lifted and the held movements
// become due. It journals a change of lineage. Calling it on a confirmed
// file changes nothing in the file.
//
// A restored copy takes a new identity, and the directory's marker
// (MarkerSuffix) follows it: with Options.Lineage, the marker names both
// identities before the transaction and the new one after it, so the
// next start never takes the file for one that replaced itself, whenever
// the process stops. A marker left naming both after a failure here is
// accepted and rewritten by the next open, or by the next Confirm.
func (q *Queue) Confirm(rec CentralRecord) (Confirmation, error) {
	next, err := newFileID()
	if err != nil {
		return Confirmation{}, err
	}
	if q.opts.Lineage {
		if l := q.Lineage(); restores(l, rec) {
			if err := writeMarker(q.opts.Path, l.FileID, next); err != nil {
				return Confirmation{}, fmt.Errorf("queue: confirm: record the data file's next identity beside it: %w", err)
			}
		}
	}
	var out Confirmation
	var lin Lineage
	err = q.do(&op{apply: func(tx *bolt.Tx) error {
		out = Confirmation{}
		l, err := q.confirm(tx, rec, next, &out)
		if err != nil {
			return err
		}
		lin = l
		return nil
	}, after: func() {
		q.leaseMu.Lock()
		q.lineage = lin
		q.leaseMu.Unlock()
		q.notify()
	}})
	if err == nil && q.opts.Lineage {
		if err := WriteMarker(q.opts.Path, out.FileID); err != nil {
			return out, fmt.Errorf("queue: confirm: record the data file's identity beside it: %w", err)
		}
	}
	return out, err
}

// restores reports whether Confirm of rec makes a file of lineage l a
// restored copy, which takes a new identity: it gave sequences before
// this start and rec reaches its fence.
func restores(l Lineage, rec CentralRecord) bool {
	return l.Fence > 1 && rec.Highest >= l.Fence && rec.Highest <= MaxSeq
}

// confirm is Confirm's transaction: it fills out and returns the file's
// lineage once rec is applied; a restored copy takes the identity next.
func (q *Queue) confirm(tx *bolt.Tx, rec CentralRecord, next string, out *Confirmation) (Lineage, error) {
	b := buckets(tx)
	cur := readLineage(b.meta)
	if cur.Fence == 0 {
		out.Lineage = cur
		return cur, nil
	}
	if rec.Highest > MaxSeq {
		return Lineage{}, ErrSeqRange
	}
	now := q.opts.Clock()
	if rec.Highest >= cur.Fence {
		out.Behind = true
		if err := continueAfter(tx, b, rec, cur, next, now, out); err != nil {
			return Lineage{}, err
		}
	}
	if !out.Behind && !rec.Unverified && !cur.Knows(rec.FileID) {
		// Central's newest record is another file's, corroborated, and
		// this file is not behind it: two files give the store's
		// sequences (a cloned PC or VM). Keep everything held, say so,
		// and wait for an operator.
		if err := markForeign(tx, b, rec, cur, now); err != nil {
			return Lineage{}, err
		}
		out.Lineage = readLineage(b.meta)
		return out.Lineage, nil
	}
	if err := b.meta.Delete(metaFence); err != nil {
		return Lineage{}, err
	}
	out.Lineage = readLineage(b.meta)
	if err := q.logConfirmed(tx, b, out.Behind, rec.Highest, out.Origin); err != nil {
		return Lineage{}, err
	}
	return out.Lineage, nil
}

// continueAfter gives the movements held back, in a file behind central's
// record, the sequences after rec.Highest, continues the file after it and
// records its new lineage; it fills out's renumbering.
func continueAfter(tx *bolt.Tx, b txBuckets, rec CentralRecord, cur Lineage, next string, now time.Time, out *Confirmation) error {
	fence := cur.Fence
	last := getU64(b.meta, metaNextSeq)
	shift := rec.Highest - fence + 1
	n, err := renumber(b, fence, last, shift)
	if err != nil {
		return err
	}
	out.Renumbered = n
	if n > 0 {
		out.From, out.To = fence, last
	}
	newLast := max(last+shift, rec.Highest)
	if last < fence {
		newLast = rec.Highest
	}
	if err := b.meta.Put(metaNextSeq, u64(newLast)); err != nil {
		return err
	}
	return recordContinuation(tx, b, rec, cur, next, n, now)
}

// recordContinuation writes the lineage of a file that continues after
// central's record, with rec.FileID as its predecessor, and journals it:
// a file that gave sequences before this start is an older copy, and
// continues under the new identity next.
func recordContinuation(tx *bolt.Tx, b txBuckets, rec CentralRecord, cur Lineage, next string, renumbered int, now time.Time) error {
	fence := cur.Fence
	origin, id := OriginReplaced, cur.FileID
	reason := "the data file is new and continues after central's record of the store"
	if fence > 1 {
		// The file gave sequences before this start: an older copy.
		origin = OriginRestored
		reason = "the data file is older than central's record of the store (restored from a backup or a rolled-back snapshot): it continues after central's record under a new identity"
		id = next
		if err := b.meta.Put(metaRestored, u64(uint64(now.UnixNano()))); err != nil {
			return err
		}
	}
	prev := rec.FileID
	if err := putLineage(b.meta, id, origin, prev, rec.Highest, now); err != nil {
		return err
	}
	detail := map[string]string{
		"file": id, "origin": origin, "prev": prev,
		"central_highest":  strconv.FormatUint(rec.Highest, 10),
		"file_last_before": strconv.FormatUint(fence-1, 10),
		"renumbered":       strconv.Itoa(renumbered),
	}
	if origin == OriginRestored {
		detail["file_before"] = cur.FileID
	}
	return appendEvents(tx, Event{At: now, Action: ActionLineage, Actor: ActorAgent, Reason: reason, Detail: detail})
}

// markForeign records that central's newest record is another data
// file's, and journals it the first time.
func markForeign(tx *bolt.Tx, b txBuckets, rec CentralRecord, cur Lineage, now time.Time) error {
	if err := b.meta.Put(metaForeign, []byte(rec.FileID)); err != nil {
		return err
	}
	if cur.Foreign != "" {
		return nil
	}
	return appendEvents(tx, Event{At: now, Action: ActionLineage, Actor: ActorAgent,
		Reason: "central's record of the store names a data file this file does not know: another data file gives the store's sequences (a cloned PC or VM?); nothing is sent until an operator decides (agent data adopt or discard)",
		Detail: map[string]string{"file": cur.FileID, "central_file": rec.FileID, "central_highest": strconv.FormatUint(rec.Highest, 10)}})
}

// renumber gives the pending movements with sequences fence..last the
// sequences shifted by shift. Every movement from the fence on is
// pending: nothing from there was sent before the fence was lifted.
func renumber(b txBuckets, fence, last, shift uint64) (int, error) {
	if last < fence {
		return 0, nil
	}
	type moved struct {
		r   *Record
		old uint64
	}
	var all []moved
	c := b.pending.Cursor()
	for k, v := c.Seek(u64(fence)); k != nil; k, v = c.Next() {
		r, err := unmarshalRecord(k, v)
		if err != nil {
			return 0, err
		}
		all = append(all, moved{r, r.Seq})
	}
	// Remove first, then write: old and new ranges may overlap.
	for _, m := range all {
		if err := b.pending.Delete(u64(m.old)); err != nil {
			return 0, err
		}
		if err := b.due.Delete(dueKey(m.r.NextAt, m.old)); err != nil {
			return 0, err
		}
	}
	b.pending.FillPercent, b.due.FillPercent = 1.0, 1.0
	for _, m := range all {
		m.r.Seq = m.old + shift
		if err := b.pending.Put(u64(m.r.Seq), m.r.marshal(false)); err != nil {
			return 0, err
		}
		if err := b.due.Put(dueKey(m.r.NextAt, m.r.Seq), nil); err != nil {
			return 0, err
		}
		v, err := b.keys.Get(m.r.Key[:])
		if err != nil {
			return 0, err
		}
		if v == nil {
			return 0, errors.New("queue: key record missing for a held movement")
		}
		e, err := unmarshalKeyEntry(v)
		if err != nil {
			return 0, err
		}
		if e.Long && e.State != Pending || e.Seq != m.old {
			return 0, fmt.Errorf("queue: renumber: sequence %d is %s under another sequence", m.old, e.State)
		}
		e.Seq = m.r.Seq
		if err := b.keys.Put(m.r.Key[:], e.marshal()); err != nil {
			return 0, err
		}
	}
	return len(all), nil
}

// Adopt records that an operator accepted the file as the store's (agent
// data adopt): journalled with who and why. A foreign file central named
// (Lineage.Foreign) is accepted from then on.
func (q *Queue) Adopt(actor, reason string, detail map[string]string) error {
	if reason == "" {
		return ErrNoReason
	}
	return q.do(&op{apply: func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if f := meta.Get(metaForeign); f != nil {
			if err := meta.Put(metaAccepted, append([]byte(nil), f...)); err != nil {
				return err
			}
			if err := meta.Delete(metaForeign); err != nil {
				return err
			}
		}
		if err := q.logAdopted(tx); err != nil {
			return err
		}
		d := map[string]string{"file": string(meta.Get(metaFileID))}
		for k, v := range detail {
			d[k] = v
		}
		return appendEvents(tx, Event{At: q.opts.Clock(), Action: ActionLineage, Actor: actor, Reason: reason, Detail: d})
	}})
}

// FileIDOf reads the identity of the data file at path without taking its
// lock for long: "" for a file of schema 1, which has none yet.
func FileIDOf(path string) (id string, lastSeq uint64, err error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	if err != nil {
		return "", 0, err
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return errors.New("not an agent data file (no meta bucket)")
		}
		id = string(meta.Get(metaFileID))
		if v := meta.Get(metaNextSeq); len(v) == 8 {
			lastSeq = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	return id, lastSeq, err
}

// newFileID is a random (version 4) UUID in its text form: the queue
// links nothing but bbolt, so it makes its own.
func newFileID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
