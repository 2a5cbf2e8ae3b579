package audit

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/internal/holdpoint"
)

// DefaultWitnessKeyName is the note key name of head office's witness key.
const DefaultWitnessKeyName = "rxedge-witness"

// GenerateWitnessKey makes a witness key: skey, the private key the
// witness keeps, and vkey, the verifier key verify and verify-proof take.
func GenerateWitnessKey(rand io.Reader, name string) (skey, vkey string, err error) {
	if name == "" {
		name = DefaultWitnessKeyName
	}
	return note.GenerateKey(rand, name)
}

// WitnessOptions configure a Witness.
type WitnessOptions struct {
	// Conn reads the archives and publishes to the witness stream.
	Conn      *nats.Conn
	APIPrefix string
	// Archives names the archives to read; nil lists the streams.
	Archives []string
	Roster   *provision.Roster
	// Signer is the witness's key.
	Signer note.Signer
	// StateFile keeps, per log, the last checkpoint countersigned, per
	// archive, the last message read, and the witness stream's last
	// sequence it read or published, with a signature by Signer over all
	// of it. It is written whole to a temporary file, synced, and renamed
	// over the old one. At start the witness reads the witness stream
	// after that sequence (all of it when there is no state file) and
	// takes each countersignature of its own key that is newer than the
	// state's for its log.
	StateFile string
	// Stream is the witness stream; default central.WitnessStreamName.
	// `hq provision` creates it; when it does not exist the witness
	// tries to create it (a development hub) and, when that is denied,
	// says to run hq provision.
	Stream string
	// CreateTimeout bounds that attempt, which a server that denies it
	// does not answer; default 5s.
	CreateTimeout time.Duration
	// Log gets a line per refusal, for the first 16 of a pass, then one
	// line saying more are counted. Default slog.Default().
	Log *slog.Logger
	// Registerer, when set, gets the witness's metrics.
	Registerer prometheus.Registerer
}

// Why a checkpoint is refused.
const (
	RefusedBadSignature = "bad_signature" // not signed by a roster key of its store
	RefusedForked       = "forked"        // inconsistent with the last countersigned
	RefusedUnprovable   = "unprovable"    // its proof is not from the size last countersigned
	RefusedMalformed    = "malformed"
)

// WitnessRun is what one pass of the witness did.
type WitnessRun struct {
	Read          uint64         `json:"read"`
	Countersigned uint64         `json:"countersigned"`
	Skipped       uint64         `json:"skipped"` // countersigned before, or older than the last countersigned
	Refused       map[string]int `json:"refused,omitempty"`
}

// witnessState is the state file's content.
type witnessState struct {
	Streams map[string]uint64        `json:"streams"`
	Logs    map[string]witnessedSize `json:"logs"`
	// Witness is the witness stream's sequence of the last
	// countersignature published.
	Witness uint64 `json:"witness"`
}

type witnessedSize struct {
	First uint64      `json:"first"`
	Size  int64       `json:"size"`
	Root  ledger.Hash `json:"root"`
}

// Witness countersigns the stores' checkpoints it can check.
type Witness struct {
	o       WitnessOptions
	js      jetstream.JetStream
	state   witnessState
	counter *prometheus.CounterVec
}

// NewWitness loads the state and makes sure the witness stream exists.
func NewWitness(ctx context.Context, o WitnessOptions) (*Witness, error) {
	if o.Signer == nil || o.StateFile == "" || o.Conn == nil || o.Roster == nil {
		return nil, errors.New("audit: a witness needs a connection, a key, the roster and a state file")
	}
	if o.Stream == "" {
		o.Stream = central.WitnessStreamName
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.CreateTimeout <= 0 {
		o.CreateTimeout = 5 * time.Second
	}
	w := &Witness{o: o}
	st, missing, err := loadWitnessState(o.StateFile, o.Signer)
	if err != nil {
		return nil, err
	}
	w.state = st
	if o.APIPrefix != "" {
		w.js, err = jetstream.NewWithAPIPrefix(o.Conn, o.APIPrefix)
	} else {
		w.js, err = jetstream.New(o.Conn)
	}
	if err != nil {
		return nil, err
	}
	stream, err := w.stream(ctx)
	if err != nil {
		return nil, err
	}
	last := stream.CachedInfo().State.LastSeq
	switch {
	case last > w.state.Witness:
		// A crash between a countersignature's publish and the state's
		// save, an older state file put back, or none: from a state
		// behind what it signed the witness could countersign a fork of
		// it. Messages there of another key (the answer to a request
		// whose reply subject was a witness subject) are skipped.
		ours, others, err := w.catchUp(ctx, w.state.Witness+1, last)
		if err != nil {
			return nil, err
		}
		if missing || ours > 1 || others > 0 {
			o.Log.Warn("witness: took its countersignatures from the witness stream", "stream", o.Stream, "state_file", !missing,
				"from", w.state.Witness+1, "to", last, "countersignatures", ours, "not_its_own", others)
		}
		w.state.Witness = last
	case last < w.state.Witness:
		o.Log.Warn("witness: the witness stream holds fewer countersignatures than the witness published: it was recreated", "stream", o.Stream, "published_up_to", w.state.Witness, "last", last)
		w.state.Witness = last // its sequences start again
	}
	w.counter = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rxedge_witness_checkpoints_total",
		Help: "Checkpoints the witness read, by result (countersigned, skipped, refused) and reason of a refusal.",
	}, []string{"result", "reason"})
	if o.Registerer != nil {
		if err := o.Registerer.Register(w.counter); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Once reads every archive from where the last pass stopped to its end,
// countersigns what holds and saves the state.
func (w *Witness) Once(ctx context.Context) (WitnessRun, error) {
	run := WitnessRun{Refused: map[string]int{}}
	names, err := streams.Archives(ctx, w.js, w.o.Archives)
	if err != nil {
		return run, err
	}
	for _, name := range names {
		st, err := w.js.Stream(ctx, name)
		if err != nil {
			return run, fmt.Errorf("audit: stream %s: %w", name, err)
		}
		last := st.CachedInfo().State.LastSeq
		from := w.state.Streams[name] + 1
		if from > last+1 {
			// The archive holds fewer messages than were read: it was
			// recreated. Read it again from the start; what was
			// countersigned is not countersigned again.
			w.o.Log.Warn("witness: archive is shorter than when last read: it was recreated", "stream", name, "read_up_to", from-1, "last", last)
			w.counter.WithLabelValues("archive_recreated", "").Inc()
			from = 1
		}
		_, err = scanPrefix(ctx, w.js, name, central.ArchivePrefix, from, last, nil, false, func(r record) error {
			if r.token != "" {
				run.Read++
				if err := w.checkpoint(ctx, r, &run); err != nil {
					return err
				}
			}
			w.state.Streams[name] = r.streamSeq
			return nil
		}, nil)
		if err != nil {
			return run, err
		}
		w.state.Streams[name] = last
	}
	return run, w.save()
}

// Run calls Once every interval until ctx ends.
func (w *Witness) Run(ctx context.Context, interval time.Duration, each func(WitnessRun)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		run, err := w.Once(ctx)
		if err != nil && ctx.Err() == nil {
			w.o.Log.Error("witness: pass failed", "err", err)
		}
		if err == nil && each != nil {
			each(run)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// maxRefusalLines bounds the refusals a pass logs one by one: anyone who
// may write to the streams can make records the witness refuses, as many
// as they like. The rest are counted in the metric and the pass's
// summary.
const maxRefusalLines = 16

func (w *Witness) refuse(run *WitnessRun, why, store, log string, sizes ...int64) {
	run.Refused[why]++
	w.counter.WithLabelValues("refused", why).Inc()
	switch n := refusals(run); {
	case n <= maxRefusalLines:
		s := make([]string, len(sizes))
		for i, n := range sizes {
			s[i] = strconv.FormatInt(n, 10)
		}
		w.o.Log.Warn("witness: checkpoint refused", "reason", why, "store", store, "log", log, "sizes", strings.Join(s, ", "))
	case n == maxRefusalLines+1:
		w.o.Log.Warn("witness: more checkpoints refused in this pass: counted in rxedge_witness_checkpoints_total and the pass's summary, not logged one by one")
	}
}

func refusals(run *WitnessRun) int {
	n := 0
	for _, k := range run.Refused {
		n += k
	}
	return n
}

func (w *Witness) checkpoint(ctx context.Context, r record, run *WitnessRun) error {
	var claimed []int64 // what the id says, for the log only
	log, size, perr := ledger.ParseCheckpointMsgID(r.token)
	if perr == nil {
		claimed = []int64{size}
	}
	s, err := ledger.OpenMessage(r.store, r.token, r.data, verifiers(w.o.Roster, r.store, nil))
	switch {
	case errors.Is(err, ledger.ErrNotCheckpointID) || errors.Is(err, ledger.ErrMalformed):
		w.refuse(run, RefusedMalformed, r.store, log, claimed...)
		return nil
	case err != nil || s.Misnamed:
		w.refuse(run, RefusedBadSignature, r.store, log, claimed...)
		return nil
	}
	n, c, msg := s.Note, s.Checkpoint, s.Message
	key := c.Store + "/" + c.Log
	prev, seen := w.state.Logs[key]
	if seen {
		switch {
		case c.First != prev.First:
			w.refuse(run, RefusedForked, c.Store, c.Log, prev.Size, c.Size)
			return nil
		case c.Size < prev.Size:
			run.Skipped++
			w.counter.WithLabelValues("skipped", "").Inc()
			return nil
		case c.Size == prev.Size && c.Root == prev.Root:
			run.Skipped++
			w.counter.WithLabelValues("skipped", "").Inc()
			return nil
		case c.Size == prev.Size:
			w.refuse(run, RefusedForked, c.Store, c.Log, prev.Size, c.Size)
			return nil
		case msg.PrevSize != prev.Size:
			w.refuse(run, RefusedUnprovable, c.Store, c.Log, prev.Size, msg.PrevSize, c.Size)
			return nil
		}
		if err := ledger.CheckConsistency(msg.Proof, prev.Size, prev.Root, c.Size, c.Root); err != nil {
			w.refuse(run, RefusedForked, c.Store, c.Log, prev.Size, c.Size)
			return nil
		}
	}
	signed, err := note.Sign(n, w.o.Signer)
	if err != nil {
		return fmt.Errorf("audit: countersign: %w", err)
	}
	// Publish, then save: a crash between the two makes the next pass
	// countersign the same checkpoint again, the same bytes (Ed25519 is
	// deterministic) under the same message id.
	m := nats.NewMsg(central.WitnessSubject(c.Store))
	m.Header.Set(central.HeaderMsgID, "w-"+c.Log+"-"+strconv.FormatInt(c.Size, 10))
	m.Data = signed
	ack, err := w.js.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("audit: publish a countersigned checkpoint of store %s: %w", c.Store, err)
	}
	holdpoint.Reach(holdpoint.WitnessPublish)
	w.state.Witness = max(w.state.Witness, ack.Sequence)
	w.state.Logs[key] = witnessedSize{First: c.First, Size: c.Size, Root: c.Root}
	w.state.Streams[r.stream] = r.streamSeq
	run.Countersigned++
	w.counter.WithLabelValues("countersigned", "").Inc()
	return w.save()
}

// MaxWitnessState bounds the witness's state file: some 150 bytes a log,
// room for several logs of each of 100,000 stores.
const MaxWitnessState = 64 << 20

// stateSigContext starts the text the state file's signature covers, so
// that it is never a signature of anything else.
const stateSigContext = "rxedge witness state\n"

// stateFile is the state file: the state as JSON and the witness key's
// Ed25519 signature of stateSigContext followed by it.
type stateFile struct {
	State json.RawMessage `json:"state"`
	Sig   []byte          `json:"sig"`
}

// errStateUnreadable is the refusal of a state file that does not read,
// is not signed by the witness's key, or says what cannot be.
var errStateUnreadable = errors.New("does not read as the witness's own signed state (truncated, damaged, edited, or of another witness key): " +
	"restore it from its backup, or move it away and the witness takes what it countersigned from the witness stream")

// loadWitnessState reads the state file, missing when there is none. A
// file that is over MaxWitnessState, does not parse, is not signed by
// signer (Ed25519 signs deterministically: the signature is made again
// and compared), or holds an impossible entry is refused: an edited
// state could make the witness countersign a fork of what it signed.
// The error names the file and what is wrong, never its content.
func loadWitnessState(path string, signer note.Signer) (st witnessState, missing bool, err error) {
	st = witnessState{Streams: map[string]uint64{}, Logs: map[string]witnessedSize{}}
	b, missing, err := readStateFile(path, MaxWitnessState)
	switch {
	case missing:
		return st, true, nil
	case errors.Is(err, errStateTooLarge):
		return st, false, fmt.Errorf("audit: witness state file %s is over %d bytes: it %w", path, MaxWitnessState, errStateUnreadable)
	case err != nil:
		return st, false, fmt.Errorf("audit: witness state: %w", err)
	}
	var sf stateFile
	if err := json.Unmarshal(b, &sf); err != nil || len(sf.State) == 0 {
		return st, false, fmt.Errorf("audit: witness state file %s %w", path, errStateUnreadable)
	}
	want, err := signer.Sign(append([]byte(stateSigContext), sf.State...))
	if err != nil {
		return st, false, fmt.Errorf("audit: witness state: %w", err)
	}
	if subtle.ConstantTimeCompare(want, sf.Sig) != 1 {
		return st, false, fmt.Errorf("audit: witness state file %s: its signature does not match: it %w", path, errStateUnreadable)
	}
	if err := json.Unmarshal(sf.State, &st); err != nil || st.Streams == nil || st.Logs == nil {
		return st, false, fmt.Errorf("audit: witness state file %s %w", path, errStateUnreadable)
	}
	for k, v := range st.Logs {
		store, log, ok := strings.Cut(k, "/")
		if !ok || !central.ValidStoreID(store) || log == "" || v.Size <= 0 || v.First == 0 {
			return st, false, fmt.Errorf("audit: witness state file %s holds an impossible entry: it %w", path, errStateUnreadable)
		}
	}
	return st, false, nil
}

// catchUp reads the witness stream from sequence from to last and takes
// each countersignature of the witness's own key as the last countersigned
// of its log where it is newer than the state's. It returns how many were
// its own and how many were not. Two roots for one size, both under its
// key, stop it: that is a fork the witness signed, for a person to look at.
func (w *Witness) catchUp(ctx context.Context, from, last uint64) (ours, others int, err error) {
	_, err = scanPrefix(ctx, w.js, w.o.Stream, central.WitnessPrefix, from, last, nil, false, func(r record) error {
		c, ok := w.ownCountersignature(r.data)
		if !ok || c.Store != r.store {
			others++
			return nil
		}
		ours++
		key := c.Store + "/" + c.Log
		prev, seen := w.state.Logs[key]
		switch {
		case !seen || c.Size > prev.Size:
			w.state.Logs[key] = witnessedSize{First: c.First, Size: c.Size, Root: c.Root}
		case c.Size == prev.Size && c.Root != prev.Root:
			return fmt.Errorf("audit: the witness stream %s holds at %d a countersignature of this witness's key for store %s log %s size %d "+
				"with another root than the state file's: the witness signed a fork; look into it before countersigning more", w.o.Stream, r.streamSeq, c.Store, c.Log, c.Size)
		}
		return nil
	}, nil)
	if err != nil {
		return ours, others, fmt.Errorf("audit: read the witness's countersignatures: %w", err)
	}
	return ours, others, nil
}

// ownCountersignature parses a message of the witness stream as a
// checkpoint countersigned by the witness's own key: the key's signature
// of its text, made again (Ed25519 is deterministic), is among its
// signature lines.
func (w *Witness) ownCountersignature(data []byte) (ledger.Checkpoint, bool) {
	text, sigs, ok := strings.Cut(string(data), "\n\n")
	if !ok {
		return ledger.Checkpoint{}, false
	}
	text += "\n"
	signed, err := note.Sign(&note.Note{Text: text}, w.o.Signer)
	if err != nil || len(signed) <= len(text)+1 {
		return ledger.Checkpoint{}, false
	}
	mine := strings.TrimSuffix(string(signed[len(text)+1:]), "\n")
	found := false
	for _, line := range strings.Split(sigs, "\n") {
		found = found || line == mine
	}
	if !found {
		return ledger.Checkpoint{}, false
	}
	c, err := ledger.ParseCheckpoint(text)
	if err != nil || c.Size <= 0 {
		return ledger.Checkpoint{}, false
	}
	return c, true
}

// stream finds the witness stream, or creates it where that is allowed.
func (w *Witness) stream(ctx context.Context) (jetstream.Stream, error) {
	st, err := w.js.Stream(ctx, w.o.Stream)
	if err == nil {
		return st, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("audit: witness stream %s: %w", w.o.Stream, err)
	}
	cfg := central.WitnessStreamConfig(central.StreamOptions{})
	cfg.Name = w.o.Stream
	cctx, cancel := context.WithTimeout(ctx, w.o.CreateTimeout)
	defer cancel()
	st, err = w.js.CreateStream(cctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// A server that denies the request does not answer it: the
		// caller sees a timeout, and the violation goes to the
		// connection's error handler.
		return nil, fmt.Errorf("audit: the witness stream %s does not exist and this identity may not create it (%v): "+
			"run hq provision as central's administrator, which creates it", w.o.Stream, err)
	}
	w.o.Log.Warn("witness: created the witness stream: in production hq provision creates it", "stream", w.o.Stream)
	return st, nil
}

// save writes the state file, signed, atomically (writeStateFile).
func (w *Witness) save() error {
	state, err := json.Marshal(w.state)
	if err != nil {
		return err
	}
	sig, err := w.o.Signer.Sign(append([]byte(stateSigContext), state...))
	if err != nil {
		return fmt.Errorf("audit: witness state: %w", err)
	}
	b, err := json.Marshal(stateFile{State: state, Sig: sig})
	if err != nil {
		return err
	}
	if err := writeStateFile(w.o.StateFile, b); err != nil {
		return fmt.Errorf("audit: witness state: %w", err)
	}
	return nil
}

// Witnessed lists the logs and the sizes countersigned, sorted.
func (w *Witness) Witnessed() []string {
	var out []string
	for k, v := range w.state.Logs {
		out = append(out, k+" "+strconv.FormatInt(v.Size, 10))
	}
	slices.Sort(out)
	return out
}
