package notary

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/queue"
)

// Options configure a Notary.
type Options struct {
	Queue   *queue.Queue
	StoreID string
	Settings
	// AttemptTimeout bounds one publish. Default 5 s.
	AttemptTimeout time.Duration
	Logger         *slog.Logger
	// Clock stamps checkpoints. Default time.Now.
	Clock func() time.Time
}

// Notary signs and publishes the store's checkpoints; see the package doc.
type Notary struct {
	o    Options
	conn atomic.Pointer[nats.Conn]
	poke chan struct{}

	mu    stdsync.Mutex
	state State

	used string // the verifier key of the last key read; Run's only
}

// State is the notary's part of the status document.
type State struct {
	// PublicKey is the verifier key the store signs with ("" when it has
	// none it can read).
	PublicKey string `json:"public_key,omitempty"`
	// KeyLost is when the agent made a new key because the key file was
	// missing after the store had signed with a key before: the new
	// public key must go into the roster. Zero when it did not.
	KeyLost time.Time `json:"key_lost,omitzero"`
	// Error is the last failure to sign or publish, "" after a success.
	Error string `json:"error,omitempty"`
}

// New makes a notary; Run runs it.
func New(o Options) *Notary {
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 5 * time.Second
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = DefaultInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &Notary{o: o, poke: make(chan struct{}, 1)}
}

// OnConnect is given each new connection to central (sync.Engine.OnConnect).
func (n *Notary) OnConnect(nc *nats.Conn) error {
	n.conn.Store(nc)
	n.Poke()
	return nil
}

// Poke makes Run publish (and sign, when the log grew) now.
func (n *Notary) Poke() {
	select {
	case n.poke <- struct{}{}:
	default:
	}
}

// State is the notary's state for status.
func (n *Notary) State() State {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state
}

// PrepareKey reads the signing key, making it when it is missing, so the
// status shows the public key from the start. A key that cannot be read
// stops nothing but the signing: its error is in the state.
func (n *Notary) PrepareKey() {
	if _, err := n.key(); err != nil {
		n.mu.Lock()
		n.state.Error = err.Error()
		n.mu.Unlock()
	}
}

// Run signs and publishes until ctx ends.
func (n *Notary) Run(ctx context.Context) {
	retry := time.Second
	for {
		wait := n.o.CheckpointInterval
		if err := n.Tick(ctx); err != nil && ctx.Err() == nil {
			// Retry a failed publish sooner than the next checkpoint,
			// growing the wait up to it.
			wait = min(retry, wait)
			retry = min(2*retry, n.o.CheckpointInterval)
		} else {
			retry = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-n.poke:
			t.Stop()
		case <-t.C:
		}
	}
}

// Tick signs a checkpoint when the log grew since the last, then
// publishes what central has not acknowledged, when connected. It
// returns the first failure.
func (n *Notary) Tick(ctx context.Context) error {
	err := n.sign()
	if err == nil {
		err = n.publish(ctx)
	}
	n.mu.Lock()
	n.state.Error = ""
	if err != nil {
		n.state.Error = err.Error()
	}
	n.mu.Unlock()
	return err
}

// key reads the key file, making a new key when it is missing.
func (n *Notary) key() (*Key, error) {
	k, err := LoadKey(n.o.KeyFile, n.o.StoreID)
	made := false
	if errors.Is(err, ErrNoKey) {
		if k, err = CreateKey(n.o.KeyFile, n.o.StoreID); err == nil {
			made = true
			n.created(k)
		}
	}
	if k != nil && !made && n.used != "" && k.VKey != n.used {
		// The key file was replaced while the agent ran (agent ledger
		// rotate-key): say so in the journal.
		jerr := n.o.Queue.Journal(queue.Event{At: n.o.Clock(), Action: queue.ActionLedger, Actor: queue.ActorAgent,
			Reason: "the signing key changed while the agent ran (rotated): checkpoints are signed with the new key",
			Detail: map[string]string{"old_public_key": n.used, "public_key": k.VKey}})
		if jerr != nil {
			n.o.Logger.Warn("JOURNAL_FAILED", "error", jerr.Error())
		}
		n.o.Logger.Info("LEDGER_KEY_CHANGED", "store", n.o.StoreID, "public_key", k.VKey)
	}
	n.mu.Lock()
	n.state.PublicKey = ""
	if k != nil {
		n.state.PublicKey = k.VKey
		n.used = k.VKey
	}
	n.mu.Unlock()
	if err != nil {
		n.o.Logger.Error("LEDGER_KEY_UNUSABLE", "store", n.o.StoreID, "key_file", n.o.KeyFile, "error", err.Error())
	}
	return k, err
}

// created reports a key the notary made: the store's first (it never
// signed a checkpoint), or a new one for a lost key, which is loud.
func (n *Notary) created(k *Key) {
	if st, err := n.o.Queue.Ledger(); err == nil && st.Latest == nil {
		n.o.Logger.Info("LEDGER_KEY_CREATED", "store", n.o.StoreID, "key_file", n.o.KeyFile, "public_key", k.VKey,
			"action", "add the public key to the roster after the store id")
		return
	}
	now := n.o.Clock()
	n.o.Logger.Error("LEDGER_KEY_LOST", "store", n.o.StoreID, "key_file", n.o.KeyFile, "public_key", k.VKey,
		"action", "the signing key was missing and a new one was made: add the new public key to the roster")
	jerr := n.o.Queue.Journal(queue.Event{At: now, Action: queue.ActionLedger, Actor: queue.ActorAgent,
		Reason: "the signing key file was missing: a new key was made; its public key must go into the roster",
		Detail: map[string]string{"public_key": k.VKey}})
	if jerr != nil {
		n.o.Logger.Warn("JOURNAL_FAILED", "error", jerr.Error())
	}
	n.mu.Lock()
	n.state.KeyLost = now
	n.mu.Unlock()
}

func (n *Notary) sign() error {
	k, err := n.key()
	if err != nil {
		return err
	}
	c, err := n.o.Queue.SignCheckpoint(n.o.Clock(), func(c ledger.Checkpoint) ([]byte, error) { return ledger.Sign(c, k.Signer) })
	switch {
	case errors.Is(err, queue.ErrNothingToSign):
		return nil
	case err != nil:
		return fmt.Errorf("notary: sign a checkpoint: %w", err)
	}
	n.o.Logger.Debug("CHECKPOINT_SIGNED", "store", n.o.StoreID, "log", c.Log, "size", c.Size)
	return nil
}

// publish publishes, oldest first, every checkpoint central has not
// acknowledged; nothing while not connected.
func (n *Notary) publish(ctx context.Context) error {
	nc := n.conn.Load()
	if nc == nil || !nc.IsConnected() {
		return nil
	}
	lin := n.o.Queue.Lineage()
	if !lin.Confirmed() {
		// Until the file was checked against central, the sequences it
		// gave since this start may still change (see Msg).
		return nil
	}
	cps, err := n.o.Queue.UnpublishedCheckpoints()
	if err != nil || len(cps) == 0 {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for _, c := range cps {
		last, err := n.o.Queue.LastSeq()
		if err != nil {
			return err
		}
		if err := n.publishOne(ctx, js, Msg(n.o.StoreID, c, last, lin.FileID)); err != nil {
			return fmt.Errorf("notary: publish checkpoint %s/%d: %w", c.Log, c.Size, err)
		}
		if err := n.o.Queue.CheckpointPublished(c.ID); err != nil {
			return err
		}
		n.o.Logger.Info("CHECKPOINT_PUBLISHED", "store", n.o.StoreID, "log", c.Log, "size", c.Size)
	}
	return nil
}

// Msg is the NATS message of a stored checkpoint: on the store's subject
// under the checkpoint's token, with the headers that make it stored at
// most once (a message id no other store can know first, and an expected
// last subject sequence of 0), and Rx-Digest, the body's SHA-256, as a
// movement's (a stream migration copies what has one). Its Rx-Seq and Rx-File are the last
// sequence the store gave when it published (lastSeq, confirmed: every
// movement central holds of the store is at or below it) and the file
// that gave it: a checkpoint is often the newest message of the store's
// subjects, which is what a data file reads at start to continue after
// central's record (package lineage).
func Msg(store string, c queue.StoredCheckpoint, lastSeq uint64, fileID string) *nats.Msg {
	tok := ledger.CheckpointToken(c.Log, c.Size)
	m := nats.NewMsg(central.Subject(store, tok))
	m.Header.Set(central.HeaderMsgID, ledger.CheckpointMsgID(tok, c.Message))
	m.Header.Set(central.HeaderExpectLast, "0")
	m.Header.Set(central.HeaderStore, store)
	sum := sha256.Sum256(c.Message)
	m.Header.Set(central.HeaderDigest, hex.EncodeToString(sum[:]))
	m.Header.Set(central.HeaderSeq, strconv.FormatUint(lastSeq, 10))
	if fileID != "" {
		m.Header.Set(central.HeaderFile, fileID)
	}
	m.Data = c.Message
	return m
}

func (n *Notary) publishOne(ctx context.Context, js jetstream.JetStream, m *nats.Msg) error {
	ctx, cancel := context.WithTimeout(ctx, n.o.AttemptTimeout)
	defer cancel()
	_, err := js.PublishMsg(ctx, m, jetstream.WithRetryAttempts(0))
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		// Central holds a checkpoint under this token already: this one
		// (its acknowledgement was lost), or an older copy of the file's,
		// of the same log and size. Either way the subject is taken, and
		// verify compares what central holds with what the store keeps.
		return nil
	}
	return err
}
