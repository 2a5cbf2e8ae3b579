package audit

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/provision"
)

// ProveOptions configure Prove.
type ProveOptions struct {
	Conn      *nats.Conn
	APIPrefix string
	Archives  []string
	// Key is the movement's key (32 hex); Store, when set, limits the
	// search to that store's archive.
	Key, Store string
	// Roster, when set, picks only checkpoints signed by a roster key.
	Roster *provision.Roster
	// WitnessStream is where countersigned checkpoints are looked for;
	// default central.WitnessStreamName. A countersigned checkpoint that covers
	// the movement is preferred. NoWitness does not look (an identity
	// that may not read it).
	WitnessStream string
	NoWitness     bool
	// MaxBuffered bounds the leaves held that arrive ahead of a missing
	// one. Default DefaultMaxBuffered.
	MaxBuffered int
	Progress    func(read string, done, total uint64)
}

// ErrNotFound is matched by Prove's error when the archive does not hold
// the movement.
var ErrNotFound = errors.New("audit: the archive holds no movement of that key")

// ErrNotCovered is matched by Prove's error when no checkpoint covers the
// movement yet.
var ErrNotCovered = errors.New("audit: no signed checkpoint covers the movement yet")

// Prove writes the inspector's proof of one movement: its payload and
// leaf, the newest signed checkpoint of its log that covers it (a
// countersigned one when there is one), and its inclusion proof in that
// checkpoint's tree, rebuilt from the archive leaf by leaf.
func Prove(ctx context.Context, o ProveOptions) (ledger.Proof, error) {
	var p ledger.Proof
	if o.WitnessStream == "" {
		o.WitnessStream = central.WitnessStreamName
	}
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = DefaultMaxBuffered
	}
	key := strings.ToLower(o.Key)
	if kb, err := hex.DecodeString(key); err != nil || len(kb) != 16 {
		return p, errors.New("audit: a movement key is 32 hex digits")
	}
	var js jetstream.JetStream
	var err error
	if o.APIPrefix != "" {
		js, err = jetstream.NewWithAPIPrefix(o.Conn, o.APIPrefix)
	} else {
		js, err = jetstream.New(o.Conn)
	}
	if err != nil {
		return p, err
	}
	names, err := archiveStreams(ctx, js, o.Archives)
	if err != nil {
		return p, err
	}
	last, total, err := snapshotLast(ctx, js, names)
	if err != nil {
		return p, err
	}
	var subjects []string
	if o.Store != "" {
		subjects = []string{central.ArchiveSubject(o.Store)}
	}
	// First read, headers only: the movement, and each log's newest
	// checkpoint.
	var found *record
	newest := map[string]map[string]struct {
		size int64
		at   loc
	}{}
	for _, name := range names {
		_, err := scan(ctx, js, name, last[name], subjects, true, func(r record) error {
			if r.token != "" {
				log, size, err := ledger.ParseCheckpointMsgID(r.token)
				if err != nil {
					return nil
				}
				if newest[r.store] == nil {
					newest[r.store] = map[string]struct {
						size int64
						at   loc
					}{}
				}
				if cur, ok := newest[r.store][log]; !ok || size > cur.size {
					newest[r.store][log] = struct {
						size int64
						at   loc
					}{size, loc{r.stream, r.streamSeq}}
				}
				return nil
			}
			if found == nil && central.KeyOfMsgID(r.h.Get(central.HeaderMsgID)) == key {
				rr := r
				found = &rr
			}
			return nil
		}, progressFn(o.Progress, "finding the movement", total))
		if err != nil {
			return p, err
		}
	}
	if found == nil {
		return p, ErrNotFound
	}
	leaf, ok := leafOf(found.h)
	if !ok {
		return p, errors.New("audit: the archived movement has no usable sequence, key or digest")
	}
	payload, _, err := readOne(ctx, js, found.stream, found.store, found.streamSeq)
	if err != nil {
		return p, fmt.Errorf("audit: read the movement: %w", err)
	}
	if !payloadMatches(leaf, payload) {
		return p, errors.New("audit: the archived payload does not match its digest: run agent central verify")
	}
	// The newest checkpoint of the movement's log.
	var best *ledger.Checkpoint
	var bestNote string
	for _, c := range newest[found.store] {
		note, cp, err := fetchNote(ctx, js, c.at, found.store, o.Roster)
		if err != nil || cp.First > leaf.Seq {
			continue
		}
		if best == nil || cp.First > best.First {
			cc := cp
			best, bestNote = &cc, note
		}
	}
	if best == nil || leaf.Seq-best.First >= uint64(best.Size) {
		return p, ErrNotCovered
	}
	// A countersigned checkpoint of the log that covers it, when there is
	// one: the newest.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if o.NoWitness {
		cancel()
	}
	if wst, err := js.Stream(wctx, o.WitnessStream); err == nil && wst.CachedInfo().State.Msgs > 0 {
		var wbest *ledger.Checkpoint
		_, err := scanPrefix(ctx, js, o.WitnessStream, central.WitnessPrefix, 0, wst.CachedInfo().State.LastSeq, []string{central.WitnessSubject(found.store)}, false, func(r record) error {
			text, _, _ := strings.Cut(string(r.data), "\n\n")
			c, err := ledger.ParseCheckpoint(text + "\n")
			if err != nil || c.Log != best.Log || c.First != best.First || leaf.Seq-c.First >= uint64(c.Size) {
				return nil
			}
			if o.Roster != nil {
				if _, _, err := ledger.Open(r.data, verifiers(o.Roster, found.store, nil)); err != nil {
					return nil
				}
			}
			if wbest == nil || c.Size > wbest.Size {
				cc := c
				wbest, bestNote = &cc, string(r.data)
			}
			return nil
		}, nil)
		if err != nil {
			return p, err
		}
		if wbest != nil {
			best = wbest
		}
	}
	// Second read, headers only: the log's leaves up to the checkpoint's
	// size, in sequence order, into the inclusion proof.
	index := int64(leaf.Seq - best.First)
	b, err := ledger.NewInclusionBuilder(best.Size, index)
	if err != nil {
		return p, err
	}
	var tree ledger.Frontier
	next, end := best.First, best.First+uint64(best.Size)
	buf := map[uint64]ledger.Hash{}
	add := func(h ledger.Hash) {
		b.Add(h)
		tree.Append(h)
		next++
	}
	for _, name := range names {
		_, err := scan(ctx, js, name, last[name], []string{central.ArchiveSubject(found.store)}, true, func(r record) error {
			if r.token != "" || next >= end {
				return nil
			}
			l, ok := leafOf(r.h)
			if !ok || l.Seq < next || l.Seq >= end {
				return nil
			}
			if l.Seq > next {
				if _, dup := buf[l.Seq]; !dup {
					buf[l.Seq] = l.Hash()
				}
				if len(buf) > o.MaxBuffered {
					return fmt.Errorf("audit: the archive lacks sequence %d of the log: run agent central verify", next)
				}
				return nil
			}
			add(l.Hash())
			for h, ok := buf[next]; ok && next < end; h, ok = buf[next] {
				delete(buf, next)
				add(h)
			}
			return nil
		}, progressFn(o.Progress, "rebuilding the tree", total))
		if err != nil {
			return p, err
		}
	}
	if next < end {
		return p, fmt.Errorf("audit: the archive lacks sequence %d of the log: run agent central verify", next)
	}
	if tree.Root() != best.Root {
		return p, errors.New("audit: the archive's leaves do not give the checkpoint's root: run agent central verify")
	}
	incl, err := b.Proof()
	if err != nil {
		return p, err
	}
	return ledger.Proof{Format: ledger.ProofFormat, Store: found.store, Payload: string(payload), Leaf: ledger.LeafOf(leaf),
		Index: index, Inclusion: incl, Checkpoint: bestNote}, nil
}

// fetchNote reads the checkpoint message at l: its signed note and
// checkpoint, checked against the roster when there is one.
func fetchNote(ctx context.Context, js jetstream.JetStream, l loc, store string, roster *provision.Roster) (string, ledger.Checkpoint, error) {
	data, _, err := readOne(ctx, js, l.stream, store, l.seq)
	if err != nil {
		return "", ledger.Checkpoint{}, err
	}
	msg, err := ledger.ParseMessage(data)
	if err != nil {
		return "", ledger.Checkpoint{}, err
	}
	if roster != nil {
		_, c, err := ledger.Open([]byte(msg.Note), verifiers(roster, store, nil))
		if err != nil || c.Store != store {
			return "", ledger.Checkpoint{}, errors.New("audit: checkpoint not signed by the store")
		}
		return msg.Note, c, nil
	}
	text, _, _ := strings.Cut(msg.Note, "\n\n")
	c, err := ledger.ParseCheckpoint(text + "\n")
	if err != nil || c.Store != store {
		return "", ledger.Checkpoint{}, errors.New("audit: not a checkpoint of the store")
	}
	return msg.Note, c, nil
}

func progressFn(p func(string, uint64, uint64), read string, total uint64) func(uint64) {
	if p == nil {
		return nil
	}
	return func(n uint64) { p(read, n, total) }
}
