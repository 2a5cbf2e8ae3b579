package queue

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rxedge/agent/central/ledger"
)

// The store's log (DESIGN P9; the contract is central/ledger).
//
// The data file keeps an append-only Merkle log of the movements it
// acknowledged: one leaf (sequence, key, digest) per movement, appended in
// the transaction that gives the movement its final sequence. That is the
// enqueue transaction when the file is confirmed, and the Confirm
// transaction, in sequence order, for the movements the lineage fence
// held back (they may be renumbered there). So a leaf is committed with,
// or after, its movement's acknowledgement, and a log's leaves are the
// consecutive sequences First … First+Size-1.
//
// A new log (a new random id, an empty tree, First the next sequence to
// log) starts with a new file, at the first open of a file that had no
// log (its earlier sequences stay outside any log), when Confirm finds the
// file behind central (replaced or restored: an older copy must not
// continue a log it had signed further before), when an operator adopts
// the file, and when the log is found out of step with the queue (a file
// written by an agent without the log, or with Options.NoLedger).
//
// The file keeps, besides the log's frontier, the leaf hashes since the
// last checkpoint central acknowledged (all a consistency proof from it
// needs; trimmed once a newer one is acknowledged), the frontier at that
// checkpoint, and every checkpoint the store signed.

var (
	bucketLedger       = []byte("ledger")
	bucketLedgerLeaves = []byte("ledger_leaves")
	bucketLedgerCPs    = []byte("ledger_checkpoints")

	ledgerLog       = []byte("log")
	ledgerFirst     = []byte("first")
	ledgerFrontier  = []byte("frontier")
	ledgerPublished = []byte("published") // frontier at the last acknowledged checkpoint of the log
	ledgerSigned    = []byte("signed")    // size of the log's newest signed checkpoint
	ledgerStarted   = []byte("started")
	ledgerCPSeq     = []byte("cp_seq")
)

// ActionLedger is the journal action of a new log.
const ActionLedger = "ledger"

// ErrLedgerOff is returned by the log's methods on a queue opened with
// Options.NoLedger.
var ErrLedgerOff = errors.New("queue: the log is turned off (Options.NoLedger)")

// LedgerState is the file's log as it stands.
type LedgerState struct {
	Log     string // the log id
	First   uint64 // the sequence of leaf 0
	Size    int64  // leaves logged
	Root    ledger.Hash
	Started time.Time // when the log started
	// Signed is the size of the newest checkpoint signed for this log
	// (0 when none) and Published that of the newest central
	// acknowledged.
	Signed, Published int64
	// Latest is the newest checkpoint the store signed, of any log (nil
	// when none).
	Latest *StoredCheckpoint
}

// StoredCheckpoint is a checkpoint the store signed, as the file keeps it.
type StoredCheckpoint struct {
	ID       uint64 `json:"id"` // signing order
	Log      string `json:"log"`
	Size     int64  `json:"size"`
	First    uint64 `json:"first"`
	Note     string `json:"note"` // the signed note
	SignedAt time.Time
	// Message is what is published (ledger.Message, with the proof from
	// the log's last acknowledged checkpoint); dropped once published.
	Message []byte `json:"message,omitempty"`
	// Frontier is the tree at the checkpoint (ledger.Frontier's binary
	// form), kept until published.
	Frontier   []byte `json:"frontier,omitempty"`
	Published  bool   `json:"published"`
	Superseded bool   `json:"superseded,omitempty"` // a newer one of the same log was signed before it was published
}

// ledgerOpen is run by Open in its transaction: it makes the log's
// buckets and starts a log when the file has none or its log does not
// continue to where the queue is.
func (q *Queue) ledgerOpen(tx *bolt.Tx) error {
	if q.opts.NoLedger {
		return nil
	}
	for _, name := range [][]byte{bucketLedger, bucketLedgerLeaves, bucketLedgerCPs} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	next := getU64(meta, metaNextSeq) + 1
	if f := getU64(meta, metaFence); f != 0 {
		next = f // from the fence on, movements are logged at Confirm
	}
	lb := tx.Bucket(bucketLedger)
	if lb.Get(ledgerLog) == nil {
		return q.startLog(tx, next, "the data file starts its log; the sequences before it are outside any log")
	}
	f, err := readFrontier(lb, ledgerFrontier)
	if err != nil {
		return err
	}
	if end := getU64(lb, ledgerFirst) + uint64(f.Size); end != next {
		return q.startLog(tx, next, fmt.Sprintf("the log ended before sequence %d, the queue at %d (written without the log): a new log starts", end, next))
	}
	return nil
}

// startLog starts a new log whose first leaf is sequence first, and
// journals it.
func (q *Queue) startLog(tx *bolt.Tx, first uint64, reason string) error {
	id, err := ledger.NewLogID(rand.Reader)
	if err != nil {
		return err
	}
	lb := tx.Bucket(bucketLedger)
	prev := string(lb.Get(ledgerLog))
	now := q.opts.Clock()
	empty, _ := ledger.Frontier{}.MarshalBinary()
	for _, kv := range [][2][]byte{
		{ledgerLog, []byte(id)}, {ledgerFirst, u64(first)}, {ledgerFrontier, empty},
		{ledgerPublished, empty}, {ledgerSigned, u64(0)}, {ledgerStarted, u64(uint64(now.UnixNano()))},
	} {
		if err := lb.Put(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if err := tx.DeleteBucket(bucketLedgerLeaves); err != nil {
		return err
	}
	leaves, err := tx.CreateBucket(bucketLedgerLeaves)
	if err != nil {
		return err
	}
	leaves.FillPercent = 1
	if prev == "" && first == 1 {
		// A new file's log is part of its first state, which is not
		// journalled (see init).
		return nil
	}
	detail := map[string]string{"log": id, "first": strconv.FormatUint(first, 10)}
	if prev != "" {
		detail["prev_log"] = prev
	}
	return appendEvents(tx, Event{At: now, Action: ActionLedger, Actor: ActorAgent, Reason: reason, Detail: detail})
}

func readFrontier(b *bolt.Bucket, k []byte) (ledger.Frontier, error) {
	var f ledger.Frontier
	if err := f.UnmarshalBinary(b.Get(k)); err != nil {
		return f, fmt.Errorf("queue: log: %w", err)
	}
	return f, nil
}

// logLeaves appends, in a transaction that gave movements their
// sequences, their leaves (consecutive sequences, ascending) to the log,
// unless the lineage fence holds them back: Confirm logs those.
func (q *Queue) logLeaves(tx *bolt.Tx, leaves []ledger.Leaf) error {
	if q.opts.NoLedger || len(leaves) == 0 || getU64(tx.Bucket(bucketMeta), metaFence) != 0 {
		return nil
	}
	return appendLeaves(tx, leaves)
}

func appendLeaves(tx *bolt.Tx, leaves []ledger.Leaf) error {
	lb, hb := tx.Bucket(bucketLedger), tx.Bucket(bucketLedgerLeaves)
	f, err := readFrontier(lb, ledgerFrontier)
	if err != nil {
		return err
	}
	hb.FillPercent = 1
	first := getU64(lb, ledgerFirst)
	for _, l := range leaves {
		if want := first + uint64(f.Size); l.Seq != want {
			return fmt.Errorf("queue: log: sequence %d does not continue the log at %d", l.Seq, want)
		}
		h := l.Hash()
		if err := hb.Put(u64(uint64(f.Size)), h[:]); err != nil {
			return err
		}
		f.Append(h)
	}
	b, err := f.MarshalBinary()
	if err != nil {
		return err
	}
	return lb.Put(ledgerFrontier, b)
}

// logConfirmed logs, in Confirm's transaction once the fence is lifted,
// the movements it held back, in sequence order; a file found behind
// central (replaced or restored) starts a new log first, at central's
// highest sequence + 1.
func (q *Queue) logConfirmed(tx *bolt.Tx, b txBuckets, behind bool, highest uint64, origin string) error {
	if q.opts.NoLedger {
		return nil
	}
	if behind {
		if err := q.startLog(tx, highest+1, "the data file continues after central's record of the store ("+origin+"): a new log starts"); err != nil {
			return err
		}
	}
	lb := tx.Bucket(bucketLedger)
	f, err := readFrontier(lb, ledgerFrontier)
	if err != nil {
		return err
	}
	from, last := getU64(lb, ledgerFirst)+uint64(f.Size), getU64(b.meta, metaNextSeq)
	if last < from {
		return nil
	}
	leaves := make([]ledger.Leaf, 0, last-from+1)
	missing := map[uint64]int{}
	for s := from; s <= last; s++ {
		leaves = append(leaves, ledger.Leaf{Seq: s})
		v := b.pending.Get(u64(s))
		if v == nil {
			missing[s] = len(leaves) - 1
			continue
		}
		h, err := peekRecord(v)
		if err != nil {
			return err
		}
		leaves[len(leaves)-1].Key, leaves[len(leaves)-1].Digest = h.Key, h.Digest
	}
	if len(missing) > 0 {
		// A held movement an operator moved out of pending: find it by
		// its sequence in the key index.
		err := b.keys.Each(func(k, v []byte) (bool, error) {
			e, err := unmarshalKeyEntry(v)
			if err != nil {
				return false, err
			}
			if i, ok := missing[e.Seq]; ok {
				held, err := b.resolve(k, e, false)
				if err != nil {
					return false, err
				}
				leaves[i].Key, leaves[i].Digest = held.Key, held.Digest
				delete(missing, e.Seq)
			}
			return len(missing) > 0, nil
		})
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("queue: log: %d held sequences have no movement", len(missing))
		}
	}
	return appendLeaves(tx, leaves)
}

// logAdopted starts a new log when an operator adopts the file.
func (q *Queue) logAdopted(tx *bolt.Tx) error {
	if q.opts.NoLedger {
		return nil
	}
	lb := tx.Bucket(bucketLedger)
	f, err := readFrontier(lb, ledgerFrontier)
	if err != nil {
		return err
	}
	return q.startLog(tx, getU64(lb, ledgerFirst)+uint64(f.Size), "an operator adopted the data file: a new log starts")
}

// Ledger reads the log's state.
func (q *Queue) Ledger() (LedgerState, error) {
	var s LedgerState
	if q.opts.NoLedger {
		return s, ErrLedgerOff
	}
	err := q.db.View(func(tx *bolt.Tx) error {
		lb := tx.Bucket(bucketLedger)
		if lb == nil {
			return errors.New("queue: the file has no log yet (opened read-only before the agent ran)")
		}
		f, err := readFrontier(lb, ledgerFrontier)
		if err != nil {
			return err
		}
		p, err := readFrontier(lb, ledgerPublished)
		if err != nil {
			return err
		}
		s = LedgerState{Log: string(lb.Get(ledgerLog)), First: getU64(lb, ledgerFirst), Size: f.Size, Root: f.Root(),
			Started: time.Unix(0, int64(getU64(lb, ledgerStarted))).UTC(), Signed: int64(getU64(lb, ledgerSigned)), Published: p.Size}
		if _, v := tx.Bucket(bucketLedgerCPs).Cursor().Last(); v != nil {
			var c StoredCheckpoint
			if err := json.Unmarshal(v, &c); err != nil {
				return fmt.Errorf("queue: log: corrupt checkpoint: %w", err)
			}
			s.Latest = &c
		}
		return nil
	})
	return s, err
}

// ErrNothingToSign is returned by SignCheckpoint when the log did not
// grow since its newest checkpoint.
var ErrNothingToSign = errors.New("queue: the log did not grow since its last checkpoint")

// SignCheckpoint signs a checkpoint of the log as it stands, when it grew
// since the log's newest checkpoint (else ErrNothingToSign), and keeps it
// with the message to publish: the note, and the consistency proof from
// the log's last checkpoint central acknowledged. sign gets the
// checkpoint and returns the signed note. An unpublished older checkpoint
// of the same log is superseded (kept, never published). The tree is read
// in a read transaction, so neither the proof nor the signature holds up
// the writer; the checkpoint is stored only if the log is still the same.
func (q *Queue) SignCheckpoint(now time.Time, sign func(ledger.Checkpoint) ([]byte, error)) (StoredCheckpoint, error) {
	var (
		sc       StoredCheckpoint
		pub, cur ledger.Frontier
		added    []ledger.Hash
	)
	if q.opts.NoLedger {
		return sc, ErrLedgerOff
	}
	err := q.db.View(func(tx *bolt.Tx) error {
		lb := tx.Bucket(bucketLedger)
		var err error
		if cur, err = readFrontier(lb, ledgerFrontier); err != nil {
			return err
		}
		if cur.Size == 0 || cur.Size <= int64(getU64(lb, ledgerSigned)) {
			return ErrNothingToSign
		}
		if pub, err = readFrontier(lb, ledgerPublished); err != nil {
			return err
		}
		sc.Log, sc.First, sc.Size = string(lb.Get(ledgerLog)), getU64(lb, ledgerFirst), cur.Size
		c := tx.Bucket(bucketLedgerLeaves).Cursor()
		for k, v := c.Seek(u64(uint64(pub.Size))); k != nil && int64(binary.BigEndian.Uint64(k)) < cur.Size; k, v = c.Next() {
			if int64(binary.BigEndian.Uint64(k)) != pub.Size+int64(len(added)) || len(v) != len(ledger.Hash{}) {
				return errors.New("queue: log: leaf hashes since the last acknowledged checkpoint are missing")
			}
			added = append(added, ledger.Hash(v))
		}
		if pub.Size+int64(len(added)) != cur.Size {
			return errors.New("queue: log: leaf hashes since the last acknowledged checkpoint are missing")
		}
		return nil
	})
	if err != nil {
		return StoredCheckpoint{}, err
	}
	proof, err := ledger.ProveConsistency(pub, added)
	if err != nil {
		return StoredCheckpoint{}, err
	}
	cp := ledger.Checkpoint{Store: q.StoreID(), Log: sc.Log, Size: cur.Size, Root: cur.Root(), First: sc.First, Time: now.UTC()}
	signed, err := sign(cp)
	if err != nil {
		return StoredCheckpoint{}, err
	}
	msg, err := ledger.Message{Note: string(signed), PrevSize: pub.Size, Proof: proof}.Marshal()
	if err != nil {
		return StoredCheckpoint{}, err
	}
	sc.Note, sc.SignedAt, sc.Message = string(signed), now.UTC(), msg
	if sc.Frontier, err = cur.MarshalBinary(); err != nil {
		return StoredCheckpoint{}, err
	}
	err = q.do(&op{apply: func(tx *bolt.Tx) error { return storeSigned(tx, &sc, pub.Size) }})
	return sc, err
}

// storeSigned stores a checkpoint just signed, under the next id, unless
// the log changed or a checkpoint was acknowledged while it was signed;
// the unpublished checkpoints before it are superseded (their message and
// frontier dropped: only the newest is ever published).
func storeSigned(tx *bolt.Tx, sc *StoredCheckpoint, pubSize int64) error {
	lb, cb := tx.Bucket(bucketLedger), tx.Bucket(bucketLedgerCPs)
	if string(lb.Get(ledgerLog)) != sc.Log || int64(getU64(lb, ledgerSigned)) >= sc.Size {
		return errors.New("queue: log: the log changed while its checkpoint was signed")
	}
	if p, err := readFrontier(lb, ledgerPublished); err != nil || p.Size != pubSize {
		return errors.New("queue: log: a checkpoint was acknowledged while another was signed")
	}
	c := cb.Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		var o StoredCheckpoint
		if err := json.Unmarshal(v, &o); err != nil {
			return err
		}
		if o.Log != sc.Log || o.Published {
			break
		}
		if !o.Superseded {
			o.Superseded, o.Message, o.Frontier = true, nil, nil
			if err := putCheckpoint(cb, o); err != nil {
				return err
			}
		}
	}
	id := getU64(lb, ledgerCPSeq) + 1
	sc.ID = id
	if err := lb.Put(ledgerCPSeq, u64(id)); err != nil {
		return err
	}
	if err := lb.Put(ledgerSigned, u64(uint64(sc.Size))); err != nil {
		return err
	}
	return putCheckpoint(cb, *sc)
}

func putCheckpoint(cb *bolt.Bucket, c StoredCheckpoint) error {
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return cb.Put(u64(c.ID), v)
}

// UnpublishedCheckpoints lists, oldest first, the checkpoints signed and
// not yet acknowledged by central (superseded ones left out).
func (q *Queue) UnpublishedCheckpoints() ([]StoredCheckpoint, error) {
	var out []StoredCheckpoint
	if q.opts.NoLedger {
		return nil, ErrLedgerOff
	}
	err := q.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLedgerCPs).Cursor()
		// Unpublished ones are at the end: walk back to the last published.
		var rev []StoredCheckpoint
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var o StoredCheckpoint
			if err := json.Unmarshal(v, &o); err != nil {
				return err
			}
			if o.Published {
				break
			}
			if !o.Superseded {
				rev = append(rev, o)
			}
		}
		for i := len(rev) - 1; i >= 0; i-- {
			out = append(out, rev[i])
		}
		return nil
	})
	return out, err
}

// Checkpoints lists every checkpoint the store signed, oldest first.
func (q *Queue) Checkpoints() ([]StoredCheckpoint, error) {
	var out []StoredCheckpoint
	if q.opts.NoLedger {
		return nil, ErrLedgerOff
	}
	err := q.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLedgerCPs).ForEach(func(_, v []byte) error {
			var o StoredCheckpoint
			if err := json.Unmarshal(v, &o); err != nil {
				return err
			}
			out = append(out, o)
			return nil
		})
	})
	return out, err
}

// CheckpointPublished records that central acknowledged checkpoint id:
// when it is of the current log and newer than the last acknowledged, its
// tree becomes the base of the next proofs and the leaf hashes before it
// are trimmed.
func (q *Queue) CheckpointPublished(id uint64) error {
	if q.opts.NoLedger {
		return ErrLedgerOff
	}
	return q.do(&op{apply: func(tx *bolt.Tx) error {
		lb, cb := tx.Bucket(bucketLedger), tx.Bucket(bucketLedgerCPs)
		v := cb.Get(u64(id))
		if v == nil {
			return fmt.Errorf("queue: log: no checkpoint %d", id)
		}
		var c StoredCheckpoint
		if err := json.Unmarshal(v, &c); err != nil {
			return err
		}
		if c.Published {
			return nil
		}
		pub, err := readFrontier(lb, ledgerPublished)
		if err != nil {
			return err
		}
		if string(lb.Get(ledgerLog)) == c.Log && c.Size > pub.Size {
			if err := lb.Put(ledgerPublished, c.Frontier); err != nil {
				return err
			}
			hb := tx.Bucket(bucketLedgerLeaves)
			var dead [][]byte
			hc := hb.Cursor()
			for k, _ := hc.First(); k != nil && int64(binary.BigEndian.Uint64(k)) < c.Size; k, _ = hc.Next() {
				dead = append(dead, k)
			}
			for _, k := range dead {
				if err := hb.Delete(k); err != nil {
					return err
				}
			}
		}
		c.Published, c.Message, c.Frontier = true, nil, nil
		return putCheckpoint(cb, c)
	}})
}

// LogLeaves reads, in one read transaction, the leaves of the log for the
// sequences from..to that the file still holds (a movement synced and
// pruned after retention.synced_keys is no longer held): what the key
// index and records say of each. At most max sequences are looked at.
func (q *Queue) LogLeaves(from, to uint64, max int) ([]ledger.Leaf, error) {
	if to < from {
		return nil, nil
	}
	if to-from >= uint64(max) {
		to = from + uint64(max) - 1
	}
	var out []ledger.Leaf
	err := q.db.View(func(tx *bolt.Tx) error {
		b := buckets(tx)
		want := map[uint64]bool{}
		for s := from; s <= to; s++ {
			want[s] = true
		}
		byseq := map[uint64]ledger.Leaf{}
		sr := b.syncedReader()
		for s := from; s <= to; s++ {
			if v := b.pending.Get(u64(s)); v != nil {
				h, err := peekRecord(v)
				if err != nil {
					return err
				}
				byseq[s] = ledger.Leaf{Seq: s, Key: h.Key, Digest: h.Digest}
				delete(want, s)
			} else if e, ok, err := sr.get(s); err != nil {
				return err
			} else if ok {
				byseq[s] = ledger.Leaf{Seq: s, Key: e.Key, Digest: e.Digest}
				delete(want, s)
			}
		}
		// Quarantined and purged movements: only the key index names them.
		err := b.keys.Each(func(k, v []byte) (bool, error) {
			if len(want) == 0 {
				return false, nil
			}
			e, err := unmarshalKeyEntry(v)
			if err != nil {
				return false, err
			}
			if !e.Long || !want[e.Seq] {
				return true, nil
			}
			held, err := b.resolve(k, e, false)
			if err != nil {
				return false, err
			}
			byseq[e.Seq] = ledger.Leaf{Seq: e.Seq, Key: held.Key, Digest: held.Digest}
			delete(want, e.Seq)
			return len(want) > 0, nil
		})
		if err != nil {
			return err
		}
		for s := from; s <= to; s++ {
			if l, ok := byseq[s]; ok {
				out = append(out, l)
			}
		}
		return nil
	})
	return out, err
}

// CheckLog checks the log against the queue, reading only: the log ends
// where the queue's logged sequences end (the last sequence given, or the
// fence's), its root is the root rebuilt from the movements the file
// holds for its sequences (when it still holds them all: synced keys are
// pruned after retention.synced_keys), and every checkpoint signed for it
// covers only logged sequences with the root of that prefix.
func (q *Queue) CheckLog() error {
	if q.opts.NoLedger {
		return ErrLedgerOff
	}
	st, err := q.Ledger()
	if err != nil {
		return err
	}
	var next uint64
	if err := q.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		next = getU64(meta, metaNextSeq) + 1
		if f := getU64(meta, metaFence); f != 0 {
			next = f
		}
		return nil
	}); err != nil {
		return err
	}
	if end := st.First + uint64(st.Size); end != next {
		return fmt.Errorf("queue: log: the log ends before %d, the queue's logged sequences before %d", end, next)
	}
	cps, err := q.Checkpoints()
	if err != nil {
		return err
	}
	sizes := map[int64]StoredCheckpoint{}
	for _, c := range cps {
		if c.Log == st.Log {
			if c.Size > st.Size {
				return fmt.Errorf("queue: log: checkpoint %d covers %d leaves, the log has %d", c.ID, c.Size, st.Size)
			}
			sizes[c.Size] = c
		}
	}
	var f ledger.Frontier
	for from := st.First; from < next; from += 1000 {
		leaves, err := q.LogLeaves(from, next-1, 1000)
		if err != nil {
			return err
		}
		for _, l := range leaves {
			if l.Seq != st.First+uint64(f.Size) {
				return nil // pruned: what is left cannot be rebuilt
			}
			f.Append(l.Hash())
			if c, ok := sizes[f.Size]; ok {
				if err := checkStoredRoot(c, f.Root()); err != nil {
					return err
				}
			}
		}
	}
	if f.Root() != st.Root {
		return errors.New("queue: log: the log's root is not the root of the movements the file holds")
	}
	return nil
}

// checkStoredRoot checks that a stored checkpoint's note states root.
func checkStoredRoot(c StoredCheckpoint, root ledger.Hash) error {
	text, _, _ := cutNote(c.Note)
	cp, err := ledger.ParseCheckpoint(text)
	if err != nil {
		return fmt.Errorf("queue: log: checkpoint %d: %w", c.ID, err)
	}
	if cp.Root != root || cp.Size != c.Size || cp.Log != c.Log {
		return fmt.Errorf("queue: log: checkpoint %d does not state the log's tree of %d leaves", c.ID, c.Size)
	}
	return nil
}

// cutNote splits a signed note's text from its signatures.
func cutNote(n string) (text, sigs string, ok bool) {
	for i := 0; i+1 < len(n); i++ {
		if n[i] == '\n' && n[i+1] == '\n' {
			return n[:i+1], n[i+2:], true
		}
	}
	return n, "", false
}

// OwnLikeDir gives a file the process just created the owner and group of
// its directory (on Windows it does nothing: the file takes its
// directory's ACL): the store's signing key written by an administrator's
// command must stay readable by the service's account, which owns the
// data directory.
func OwnLikeDir(path string) error { return ownLikeDir(path) }
