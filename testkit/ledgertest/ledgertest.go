// Package ledgertest publishes a store's movements and signed checkpoints
// to a real central the way an agent does (central/ledger's contract:
// each movement on its subject with its headers, each checkpoint a
// ledger.Message on Subject(store, CheckpointToken) with CheckpointMsgID as
// its message id), and answers the signed ledger command from what it
// published, for the tests of head office's verification. It also holds
// the tampering an administrator of central could do to an archive.
package ledgertest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
)

// Store is one store's log and what it published.
type Store struct {
	ID, Log    string
	First      uint64
	SKey, VKey string
	Signer     note.Signer

	mu       sync.Mutex
	leaves   []ledger.Leaf
	payloads [][]byte
	tree     ledger.Frontier
	// prev is the frontier of the last published checkpoint, added the
	// leaf hashes since.
	prev   ledger.Frontier
	added  []ledger.Hash
	latest string // the latest signed checkpoint
	pub    bool
	// Clock stamps checkpoints. Default an hour ago, out of verify's grace.
	Clock func() time.Time
	// Index is the index of its first movement's payload and key
	// (Payload(ID, Index)): a store's next data file, with a log of its
	// own from First on, goes on where the last left off.
	Index int
}

// NewStore makes a store with a new key and log, its first sequence 1.
func NewStore(tb testing.TB, id string) *Store {
	tb.Helper()
	skey, vkey, err := ledger.GenerateKey(rand.Reader, id)
	if err != nil {
		tb.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		tb.Fatal(err)
	}
	log, err := ledger.NewLogID(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return &Store{ID: id, Log: log, First: 1, SKey: skey, VKey: vkey, Signer: signer,
		Clock: func() time.Time { return time.Now().Add(-time.Hour) }}
}

// RosterLine is the store's line of the roster.
func (s *Store) RosterLine() string { return s.ID + " " + s.VKey + "\n" }

// Payload is the canonical payload of the store's i-th movement (from 0).
func Payload(store string, i int) []byte {
	return []byte(fmt.Sprintf(`{"movement_id":"%s-m%d","type":"dispense","ndc":"00000-0000-%02d","qty":%d}`, store, i, i%100, i+1))
}

// Key is the movement key of payload i (32 hex).
func Key(store string, i int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s-m%d", store, store, i)))
	return hex.EncodeToString(sum[:16])
}

// Movements publishes n more movements, each acknowledged by central.
func (s *Store) Movements(ctx context.Context, tb testing.TB, js jetstream.JetStream, n int) {
	tb.Helper()
	for k := 0; k < n; k++ {
		s.mu.Lock()
		i := len(s.leaves)
		p := Payload(s.ID, s.Index+i)
		key := Key(s.ID, s.Index+i)
		digest := sha256.Sum256(p)
		seq := s.First + uint64(i)
		var l ledger.Leaf
		l.Seq, l.Digest = seq, digest
		kb, _ := hex.DecodeString(key)
		copy(l.Key[:], kb)
		s.leaves, s.payloads = append(s.leaves, l), append(s.payloads, p)
		s.tree.Append(l.Hash())
		s.added = append(s.added, l.Hash())
		s.mu.Unlock()
		m := central.Message{Store: s.ID, Key: key, Digest: hex.EncodeToString(digest[:]), Seq: seq,
			EnqueuedAt: time.Now(), Payload: p}
		if _, err := js.PublishMsg(ctx, m.Msg()); err != nil {
			tb.Fatalf("publish movement %d of %s: %v", seq, s.ID, err)
		}
	}
}

// Checkpoint signs and publishes a checkpoint of the whole log, with the
// proof from the previous one; it returns the message.
func (s *Store) Checkpoint(ctx context.Context, tb testing.TB, js jetstream.JetStream) ledger.Message {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := ledger.Checkpoint{Store: s.ID, Log: s.Log, Size: s.tree.Size, Root: s.tree.Root(), First: s.First, Time: s.Clock().UTC()}
	proof, err := ledger.ProveConsistency(s.prev, s.added)
	if err != nil {
		tb.Fatal(err)
	}
	m := s.sign(tb, c, s.prev.Size, proof)
	s.publish(ctx, tb, js, c, m)
	s.prev, s.added = s.tree.Clone(), nil
	return m
}

func (s *Store) sign(tb testing.TB, c ledger.Checkpoint, prevSize int64, proof []ledger.Hash) ledger.Message {
	tb.Helper()
	signed, err := ledger.Sign(c, s.Signer)
	if err != nil {
		tb.Fatal(err)
	}
	s.latest, s.pub = string(signed), false
	return ledger.Message{Note: string(signed), PrevSize: prevSize, Proof: proof}
}

func (s *Store) publish(ctx context.Context, tb testing.TB, js jetstream.JetStream, c ledger.Checkpoint, m ledger.Message) {
	tb.Helper()
	s.publishOn(ctx, tb, js, ledger.CheckpointToken(c.Log, c.Size), c, m)
}

// publishOn publishes a checkpoint message under its message id on the
// store's subject token subj.
func (s *Store) publishOn(ctx context.Context, tb testing.TB, js jetstream.JetStream, subj string, c ledger.Checkpoint, m ledger.Message) {
	tb.Helper()
	body, err := m.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	tok := ledger.CheckpointToken(c.Log, c.Size)
	msg := nats.NewMsg(central.Subject(s.ID, subj))
	msg.Header.Set(central.HeaderMsgID, ledger.CheckpointMsgID(tok, body))
	msg.Header.Set(central.HeaderExpectLast, "0")
	msg.Header.Set(central.HeaderStore, s.ID)
	msg.Data = body
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		tb.Fatalf("publish checkpoint %s of %s: %v", tok, s.ID, err)
	}
	s.pub = true
}

// SignOnly signs a checkpoint of the whole log without publishing it (a
// store that lost its connection), as its latest.
func (s *Store) SignOnly(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := ledger.Checkpoint{Store: s.ID, Log: s.Log, Size: s.tree.Size, Root: s.tree.Root(), First: s.First, Time: s.Clock().UTC()}
	s.sign(tb, c, s.prev.Size, nil)
}

// Fork signs and publishes a checkpoint of the log with the movement at
// index i replaced, as a store rewriting its history would: its proof is
// from the previous checkpoint, over the rewritten tree.
func (s *Store) Fork(ctx context.Context, tb testing.TB, js jetstream.JetStream, i int) ledger.Checkpoint {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var forked, old ledger.Frontier
	for k, l := range s.leaves {
		if k == int(s.prev.Size) {
			old = forked.Clone()
		}
		if k == i {
			l.Digest[0] ^= 1
		}
		forked.Append(l.Hash())
	}
	if int(s.prev.Size) == len(s.leaves) {
		old = forked.Clone()
	}
	proof, err := ledger.ProveConsistency(old, s.added)
	if err != nil {
		tb.Fatal(err)
	}
	c := ledger.Checkpoint{Store: s.ID, Log: s.Log, Size: forked.Size, Root: forked.Root(), First: s.First, Time: s.Clock().UTC()}
	m := s.sign(tb, c, s.prev.Size, proof)
	s.publish(ctx, tb, js, c, m)
	return c
}

// ForkFrom signs and publishes a checkpoint of the whole log with the
// movement at index i (at or after from) replaced, and its proof from the
// store's size from: a store rewriting history that an older checkpoint
// of size from does not cover, but a later one it published does.
func (s *Store) ForkFrom(ctx context.Context, tb testing.TB, js jetstream.JetStream, from int64, i int) ledger.Checkpoint {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if from <= 0 || int64(i) < from || i >= len(s.leaves) {
		tb.Fatalf("ForkFrom(%d, %d) of a log of %d leaves", from, i, len(s.leaves))
	}
	var forked, old ledger.Frontier
	var added []ledger.Hash
	for k, l := range s.leaves {
		if int64(k) == from {
			old = forked.Clone()
		}
		if k == i {
			l.Digest[0] ^= 1
		}
		forked.Append(l.Hash())
		if int64(k) >= from {
			added = append(added, l.Hash())
		}
	}
	proof, err := ledger.ProveConsistency(old, added)
	if err != nil {
		tb.Fatal(err)
	}
	c := ledger.Checkpoint{Store: s.ID, Log: s.Log, Size: forked.Size, Root: forked.Root(), First: s.First, Time: s.Clock().UTC()}
	m := s.sign(tb, c, from, proof)
	s.publish(ctx, tb, js, c, m)
	return c
}

// PublishRoot signs with the store's key and publishes a checkpoint of its
// log at size with root, its proof empty from prevSize: a store signing
// what its log does not hold, at any size, late (on a subject token of its
// own, for the checkpoint's may be taken).
func (s *Store) PublishRoot(ctx context.Context, tb testing.TB, js jetstream.JetStream, size int64, root ledger.Hash, prevSize int64) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := ledger.Checkpoint{Store: s.ID, Log: s.Log, Size: size, Root: root, First: s.First, Time: s.Clock().UTC()}
	latest, pub := s.latest, s.pub
	s.publishOn(ctx, tb, js, Key(s.ID, int(1e9+size)), c, s.sign(tb, c, prevSize, nil))
	s.latest, s.pub = latest, pub // its answer stays its real latest
}

// Leaves are the store's leaves.
func (s *Store) Leaves() []ledger.Leaf {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ledger.Leaf(nil), s.leaves...)
}

// Answer is what the store answers the ledger command.
func (s *Store) Answer(a command.LedgerArgs) command.LedgerResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := command.LedgerResult{Checkpoint: s.latest, Published: s.pub, PublicKey: s.VKey}
	if a.Leaves != nil {
		for seq := a.Leaves[0]; seq <= a.Leaves[1] && seq >= s.First && seq-s.First < uint64(len(s.leaves)); seq++ {
			l := s.leaves[seq-s.First]
			res.Leaves = append(res.Leaves, command.LedgerLeaf{Seq: l.Seq, Key: hex.EncodeToString(l.Key[:]), Digest: hex.EncodeToString(l.Digest[:])})
		}
	}
	return res
}

// Respond answers the ledger command on nc for the store, as its agent
// would: only commands signed by operator (a public user NKey). It stops
// when the test ends.
func (s *Store) Respond(tb testing.TB, nc *nats.Conn, operator string) {
	tb.Helper()
	kp, err := nkeys.FromPublicKey(operator)
	if err != nil {
		tb.Fatal(err)
	}
	subject := command.Subject(s.ID, command.CmdLedger)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		rep := command.Reply{Store: s.ID}
		e, err := command.DecodeEnvelope(m.Data)
		sig, serr := e.Signature()
		var a command.LedgerArgs
		switch {
		case err != nil:
			rep.Code, rep.Error = command.CodeMalformed, "malformed"
		case e.Key != operator || serr != nil || kp.Verify(e.SigningBytes(m.Subject), sig) != nil:
			rep.Code, rep.Error = command.CodeBadSignature, "not signed by the operator"
		case e.Cmd != command.CmdLedger || e.Store != s.ID:
			rep.Code, rep.Error = command.CodeWrongTarget, "wrong target"
		case len(e.Args) > 0 && json.Unmarshal(e.Args, &a) != nil,
			a.Leaves != nil && (a.Leaves[0] == 0 || a.Leaves[1] < a.Leaves[0] || a.Leaves[1]-a.Leaves[0] >= command.MaxLedgerLeaves):
			rep.Code, rep.Error = command.CodeBadRequest, "bad leaves"
		default:
			rep.OK = true
			rep.Result, _ = json.Marshal(s.Answer(a))
		}
		b, _ := json.Marshal(rep)
		_ = m.Respond(b)
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
}

// Operator makes an operator's signing key: the seed file's content and
// the public key.
func Operator(tb testing.TB) (seed []byte, pub string) {
	tb.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		tb.Fatal(err)
	}
	seed, _ = kp.Seed()
	pub, _ = kp.PublicKey()
	return seed, pub
}

// OperatorSigner makes an operator's signing key and returns its signer.
func OperatorSigner(tb testing.TB) *command.Signer {
	tb.Helper()
	seed, _ := Operator(tb)
	s, err := command.NewSigner(seed)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// OperatorFile writes a new operator seed file (mode 0600) and returns its
// path and the public key.
func OperatorFile(tb testing.TB) (path, pub string) {
	tb.Helper()
	seed, pub := Operator(tb)
	path = filepath.Join(tb.TempDir(), "operator.nk")
	if err := os.WriteFile(path, seed, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path, pub
}

// Asker answers in process from the stores (for tests that do not go
// through NATS); a store it does not know does not answer.
type Asker map[string]*Store

// Ledger answers as the store would.
func (a Asker) Ledger(_ context.Context, store string, args command.LedgerArgs) (command.LedgerResult, error) {
	s, ok := a[store]
	if !ok {
		return command.LedgerResult{}, fmt.Errorf("store %s does not answer", store)
	}
	return s.Answer(args), nil
}

// Record is one archive message as RewriteArchive hands it to its edit.
type Record struct {
	Subject string
	Header  nats.Header
	Data    []byte
	// StreamSeq is where the archive held it (set when read; ignored when
	// published).
	StreamSeq uint64
}

// Token is the record's checkpoint token, or "" for a movement.
func (r Record) Token() string {
	if id := r.Header.Get(central.HeaderMsgID); ledger.IsCheckpointToken(id) {
		return id
	}
	return ""
}

// Seq is the record's Rx-Seq, 0 for a checkpoint.
func (r Record) Seq() uint64 {
	var n uint64
	fmt.Sscan(r.Header.Get(central.HeaderSeq), &n)
	return n
}

// WaitArchived waits until archive name holds n messages (its sourcing
// from the movement stream is asynchronous), failing after a minute.
func WaitArchived(ctx context.Context, tb testing.TB, js jetstream.JetStream, name string, n uint64) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := js.Stream(ctx, name)
		if err == nil && st.CachedInfo().State.Msgs >= n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("archive %s did not reach %d messages in a minute (%v)", name, n, err)
		}
		time.Sleep(20 * time.Millisecond) // polled: awaiting the archive's sourcing
	}
}

// RewriteArchive does what central's administrator can: it reads archive
// name, deletes the stream, recreates it with the same configuration
// (its source starting after what the movement stream holds, as once the
// movement stream's horizon has passed) and republishes directly into it
// the records edit returns, in that order.
func RewriteArchive(ctx context.Context, tb testing.TB, js jetstream.JetStream, name string, edit func([]Record) []Record) {
	tb.Helper()
	RewriteArchiveConfig(ctx, tb, js, name, nil, edit)
}

// RewriteArchiveConfig is RewriteArchive with the recreated stream's
// configuration changed by cfg (when not nil): an administrator who
// recreates an archive that allows deletes, say.
func RewriteArchiveConfig(ctx context.Context, tb testing.TB, js jetstream.JetStream, name string, cfg func(*jetstream.StreamConfig), edit func([]Record) []Record) {
	tb.Helper()
	info, recs := readArchive(ctx, tb, js, name)
	recs = edit(recs)
	if err := js.DeleteStream(ctx, name); err != nil {
		tb.Fatalf("delete %s: %v", name, err)
	}
	want := info.Config
	for _, src := range info.Config.Sources {
		ms, err := js.Stream(ctx, src.Name)
		if err != nil {
			tb.Fatal(err)
		}
		c := *src
		c.OptStartSeq = ms.CachedInfo().State.LastSeq + 1
		want.Sources = []*jetstream.StreamSource{&c}
	}
	if cfg != nil {
		cfg(&want)
	}
	open := want
	open.Subjects = []string{central.ArchivePrefix + ">"}
	if _, err := js.CreateStream(ctx, open); err != nil {
		tb.Fatalf("recreate %s: %v", name, err)
	}
	publishRecords(ctx, tb, js, name, recs)
	if _, err := js.UpdateStream(ctx, want); err != nil {
		tb.Fatalf("restore %s's configuration: %v", name, err)
	}
}

// readArchive reads every record archive name holds.
func readArchive(ctx context.Context, tb testing.TB, js jetstream.JetStream, name string) (*jetstream.StreamInfo, []Record) {
	tb.Helper()
	st, err := js.Stream(ctx, name)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var recs []Record
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted
		}
		if err != nil {
			tb.Fatalf("read %s:%d: %v", name, seq, err)
		}
		recs = append(recs, Record{Subject: m.Subject, Header: m.Header, Data: m.Data, StreamSeq: seq})
	}
	return info, recs
}

// publishRecords publishes recs directly into archive name, in order.
// A record whose message id the archive's duplicate window still holds
// (one deleted and published again) is published again until the window
// lets it go, for at most a minute.
func publishRecords(ctx context.Context, tb testing.TB, js jetstream.JetStream, name string, recs []Record) {
	tb.Helper()
	for _, r := range recs {
		m := nats.NewMsg(r.Subject)
		for k, v := range r.Header {
			if k == central.HeaderExpectLast || k == "Nats-Stream-Source" {
				continue
			}
			m.Header[k] = v
		}
		m.Data = r.Data
		deadline := time.Now().Add(time.Minute)
		for {
			ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(name))
			if err != nil {
				tb.Fatalf("republish into %s: %v", name, err)
			}
			if !ack.Duplicate {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("republish into %s: the duplicate window still holds message id %s after a minute", name, m.Header.Get(central.HeaderMsgID))
			}
			time.Sleep(50 * time.Millisecond) // polled: awaiting the duplicate window
		}
	}
}

// EditArchive does what central's administrator can to an archive that
// allows deletes (one recreated so, RewriteArchiveConfig), without
// recreating it: it deletes the records edit names by where the archive
// holds them (Record.StreamSeq), and publishes the records it returns at
// the archive's end, as a delete and a publish of an altered copy would.
func EditArchive(ctx context.Context, tb testing.TB, js jetstream.JetStream, name string, edit func([]Record) (remove []uint64, add []Record)) {
	tb.Helper()
	info, recs := readArchive(ctx, tb, js, name)
	remove, add := edit(recs)
	st, err := js.Stream(ctx, name)
	if err != nil {
		tb.Fatal(err)
	}
	for _, seq := range remove {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			tb.Fatalf("delete %s:%d: %v", name, seq, err)
		}
	}
	if len(add) == 0 {
		return
	}
	open := info.Config
	open.Subjects = []string{central.ArchivePrefix + ">"}
	if _, err := js.UpdateStream(ctx, open); err != nil {
		tb.Fatalf("open %s to publishes: %v", name, err)
	}
	publishRecords(ctx, tb, js, name, add)
	if _, err := js.UpdateStream(ctx, info.Config); err != nil {
		tb.Fatalf("restore %s's configuration: %v", name, err)
	}
}

// SetPayload rewrites a movement record's payload and recomputes its digest
// header (and message id, which carries the digest), as a forger would.
func (r *Record) SetPayload(p []byte) {
	sum := sha256.Sum256(p)
	d := hex.EncodeToString(sum[:])
	key := central.KeyOfMsgID(r.Header.Get(central.HeaderMsgID))
	r.Header = cloneHeader(r.Header)
	r.Header.Set(central.HeaderDigest, d)
	r.Header.Set(central.HeaderMsgID, central.MsgID(key, d))
	r.Data = p
}

// SetSeq rewrites a movement record's sequence.
func (r *Record) SetSeq(seq uint64) {
	r.Header = cloneHeader(r.Header)
	r.Header.Set(central.HeaderSeq, fmt.Sprint(seq))
}

func cloneHeader(h nats.Header) nats.Header {
	out := nats.Header{}
	for k, v := range h {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// PublishForged signs with signer (another store's key) a checkpoint of
// store's log at size, over a made-up root, and publishes it on store's
// subject as a checkpoint.
func PublishForged(ctx context.Context, tb testing.TB, js jetstream.JetStream, signer note.Signer, store, log string, size int64) {
	tb.Helper()
	c := ledger.Checkpoint{Store: store, Log: log, Size: size, Root: ledger.Hash(sha256.Sum256([]byte("forged"))), First: 1, Time: time.Now().Add(-time.Hour).UTC()}
	signed, err := note.Sign(&note.Note{Text: c.Text()}, signer)
	if err != nil {
		tb.Fatal(err)
	}
	s := &Store{ID: store}
	s.publish(ctx, tb, js, c, ledger.Message{Note: string(signed)})
}

// Forgery is what PublishUnsigned writes at its i-th record: the log and
// size its checkpoint token names.
type Forgery func(i int) (log string, size int64)

// PublishUnsigned publishes n records under checkpoint tokens on store's
// movement subjects, as a user of the streams' account (central's
// administrator, a tool) can: each a well-formed checkpoint message whose
// note no key signed, naming the log and size forge gives. It publishes
// asynchronously, a window at a time, and returns once central
// acknowledged every one.
func PublishUnsigned(ctx context.Context, tb testing.TB, js jetstream.JetStream, store string, n int, forge Forgery) {
	tb.Helper()
	const window = 2048
	for lo := 0; lo < n; lo += window {
		var acks []jetstream.PubAckFuture
		for i := lo; i < min(n, lo+window); i++ {
			log, size := forge(i)
			c := ledger.Checkpoint{Store: store, Log: log, Size: size, Root: ledger.Hash(sha256.Sum256([]byte(fmt.Sprint("forged", i)))),
				First: 1, Time: time.Now().Add(-time.Hour).UTC()}
			body, err := ledger.Message{Note: c.Text() + "\n", PrevSize: 0}.Marshal()
			if err != nil {
				tb.Fatal(err)
			}
			tok := ledger.CheckpointToken(log, size)
			m := nats.NewMsg(central.Subject(store, tok))
			m.Header.Set(central.HeaderMsgID, ledger.CheckpointMsgID(tok, body))
			m.Header.Set(central.HeaderStore, store)
			m.Data = body
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				tb.Fatalf("publish forged checkpoint %d of %s: %v", i, store, err)
			}
			acks = append(acks, f)
		}
		for i, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				tb.Fatalf("publish forged checkpoint %d of %s: %v", lo+i, store, err)
			case <-ctx.Done():
				tb.Fatalf("publish forged checkpoints of %s: %v", store, ctx.Err())
			}
		}
	}
}
