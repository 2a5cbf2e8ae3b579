package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/provision"
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

// WitnessStreamConfig is the stream of countersigned checkpoints: one
// subject per store, kept as long as the archive keeps movements, no
// deletes or purges through the API.
func WitnessStreamConfig(name string, replicas int) jetstream.StreamConfig {
	if replicas <= 0 {
		replicas = central.DefaultReplicas
	}
	return jetstream.StreamConfig{
		Name:        name,
		Description: "RxEdge witness: the stores' checkpoints head office countersigned",
		Subjects:    []string{WitnessPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
		DenyDelete:  true,
		DenyPurge:   true,
		Duplicates:  central.DefaultDuplicateWindow,
		MaxAge:      central.DefaultRetention,
		Replicas:    replicas,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxMsgSize:  ledger.MaxMessage,
	}
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
	// StateFile keeps, per log, the last checkpoint countersigned and,
	// per archive, the last message read. It is written whole to a
	// temporary file, synced, and renamed over the old one.
	StateFile string
	// Stream is the witness stream; default WitnessStreamName. It is
	// created when it does not exist.
	Stream string
	// Log gets a line per refusal. Default slog.Default().
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
		o.Stream = WitnessStreamName
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	w := &Witness{o: o, state: witnessState{Streams: map[string]uint64{}, Logs: map[string]witnessedSize{}}}
	b, err := os.ReadFile(o.StateFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("audit: witness state: %w", err)
	default:
		if err := json.Unmarshal(b, &w.state); err != nil || w.state.Streams == nil || w.state.Logs == nil {
			return nil, errors.New("audit: witness state file does not read: restore it from its backup, not by starting afresh")
		}
	}
	if o.APIPrefix != "" {
		w.js, err = jetstream.NewWithAPIPrefix(o.Conn, o.APIPrefix)
	} else {
		w.js, err = jetstream.New(o.Conn)
	}
	if err != nil {
		return nil, err
	}
	if _, err := w.js.Stream(ctx, o.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := w.js.CreateStream(ctx, WitnessStreamConfig(o.Stream, 0)); err != nil {
			return nil, fmt.Errorf("audit: create the witness stream %s: %w", o.Stream, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("audit: witness stream %s: %w", o.Stream, err)
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
	names, err := archiveStreams(ctx, w.js, w.o.Archives)
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

func (w *Witness) refuse(run *WitnessRun, why, store, log string, sizes ...int64) {
	run.Refused[why]++
	w.counter.WithLabelValues("refused", why).Inc()
	w.o.Log.Warn("witness: checkpoint refused", "reason", why, "store", store, "log", log, "sizes", fmt.Sprint(sizes))
}

func (w *Witness) checkpoint(ctx context.Context, r record, run *WitnessRun) error {
	log, size, err := ledger.ParseCheckpointMsgID(r.token)
	if err != nil {
		w.refuse(run, RefusedMalformed, r.store, "")
		return nil
	}
	msg, err := ledger.ParseMessage(r.data)
	if err != nil {
		w.refuse(run, RefusedMalformed, r.store, log, size)
		return nil
	}
	n, c, err := ledger.Open([]byte(msg.Note), verifiers(w.o.Roster, r.store, nil))
	if err != nil || c.Store != r.store || c.Log != log || c.Size != size {
		w.refuse(run, RefusedBadSignature, r.store, log, size)
		return nil
	}
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
	m := nats.NewMsg(WitnessSubject(c.Store))
	m.Header.Set(central.HeaderMsgID, "w-"+c.Log+"-"+strconv.FormatInt(c.Size, 10))
	m.Data = signed
	if _, err := w.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("audit: publish a countersigned checkpoint of store %s: %w", c.Store, err)
	}
	w.state.Logs[key] = witnessedSize{First: c.First, Size: c.Size, Root: c.Root}
	w.state.Streams[r.stream] = r.streamSeq
	run.Countersigned++
	w.counter.WithLabelValues("countersigned", "").Inc()
	return w.save()
}

// save writes the state file atomically: a temporary file, synced,
// renamed over the old one, and the directory synced.
func (w *Witness) save() error {
	b, err := json.Marshal(w.state)
	if err != nil {
		return err
	}
	dir := filepath.Dir(w.o.StateFile)
	f, err := os.CreateTemp(dir, ".witness-state-*")
	if err != nil {
		return fmt.Errorf("audit: witness state: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, w.o.StateFile)
	}
	if err != nil {
		return fmt.Errorf("audit: witness state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // not possible on Windows; the rename is durable there
		d.Close()
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
