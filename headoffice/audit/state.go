package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// StateStore keeps a verification's state between passes (Options.State):
// FileState keeps it in a file, and head office's service keeps the same
// bytes in its database. The state is an opaque, versioned, self-checking
// document that Verify reads and writes whole (EncodeState's form).
type StateStore interface {
	// Load returns the state last saved, or ErrNoState when none was.
	Load(ctx context.Context) ([]byte, error)
	// Save replaces the state, atomically: a Load after a crash at any
	// point returns the old state or the new one, whole.
	Save(ctx context.Context, state []byte) error
	// String names where the state is kept, for errors.
	String() string
}

// ErrNoState is a StateStore's answer to Load when nothing was saved:
// the pass then verifies the archives from the start.
var ErrNoState = errors.New("audit: no verification state saved yet")

// Limits of a saved state.
const (
	// MaxStateBytes bounds a state: some kilobytes a log (its frontiers,
	// the leaves since its last checkpoint, a few roots), room for several
	// logs of each of 20,000 stores.
	MaxStateBytes = 256 << 20
	// StateVersion is the version of the state's form this build writes
	// and reads.
	StateVersion = 1
	stateFormat  = "rxedge.audit.verify-state"
)

// errBadState is the refusal of a state that does not read as a whole
// state of this form.
var errBadState = errors.New("does not read as a verification state (truncated, damaged or edited): " +
	"restore it from its backup, or move it away and the next pass verifies the archives from the start")

// FileState keeps the state in a file, replaced atomically at each save
// (a temporary file, synced, renamed over it). A file over MaxStateBytes,
// truncated, damaged, edited or of another version is refused with an
// error naming it.
type FileState string

// Load reads the file.
func (f FileState) Load(context.Context) ([]byte, error) {
	b, missing, err := readStateFile(string(f), MaxStateBytes)
	switch {
	case missing:
		return nil, ErrNoState
	case errors.Is(err, errStateTooLarge):
		return nil, fmt.Errorf("audit: verification state file %s is over %d bytes: it %w", string(f), MaxStateBytes, errBadState)
	case err != nil:
		return nil, fmt.Errorf("audit: verification state file %s: %w", string(f), err)
	}
	return b, nil
}

// Save replaces the file.
func (f FileState) Save(_ context.Context, b []byte) error {
	if err := writeStateFile(string(f), b); err != nil {
		return fmt.Errorf("audit: save the verification state to %s: %w", string(f), err)
	}
	return nil
}

func (f FileState) String() string { return "file " + string(f) }

// MemState keeps the state in memory (a test's, or a caller's that
// saves it elsewhere). The zero value holds none. It is safe for
// concurrent use.
type MemState struct {
	mu sync.Mutex
	b  []byte
}

// Load returns a copy of the state saved.
func (m *MemState) Load(context.Context) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b == nil {
		return nil, ErrNoState
	}
	return append([]byte(nil), m.b...), nil
}

// Save keeps a copy of b.
func (m *MemState) Save(_ context.Context, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.b = append([]byte(nil), b...)
	return nil
}

func (m *MemState) String() string { return "memory" }

// stateEnvelope is the saved form: the state's JSON and its SHA-256, so a
// damaged or cut copy is told from a whole one.
type stateEnvelope struct {
	Format  string          `json:"format"`
	Version int             `json:"version"`
	SHA256  string          `json:"sha256"`
	State   json.RawMessage `json:"state"`
}

// encodeState is the saved form of st.
func encodeState(st *stateDoc) ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	out, err := json.Marshal(stateEnvelope{Format: stateFormat, Version: StateVersion, SHA256: hex.EncodeToString(sum[:]), State: b})
	if err != nil {
		return nil, err
	}
	if len(out) > MaxStateBytes {
		return nil, fmt.Errorf("audit: the verification state would be %d bytes, over %d: verify fewer stores per state", len(out), MaxStateBytes)
	}
	return out, nil
}

// decodeState reads encodeState's form, refusing anything else: another
// format or version, a checksum that does not match, unknown fields, or
// an entry that cannot be (validate). The error says what is wrong,
// never what the state holds.
func decodeState(b []byte) (*stateDoc, error) {
	if len(b) > MaxStateBytes {
		return nil, fmt.Errorf("over %d bytes: it %w", MaxStateBytes, errBadState)
	}
	var env stateEnvelope
	if err := json.Unmarshal(b, &env); err != nil || env.Format != stateFormat || len(env.State) == 0 {
		return nil, errBadState
	}
	if env.Version != StateVersion {
		return nil, fmt.Errorf("is of version %d, and this build reads version %d: use the build that wrote it, or move it away and the next pass verifies the archives from the start", env.Version, StateVersion)
	}
	sum := sha256.Sum256(env.State)
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return nil, fmt.Errorf("its checksum does not match: it %w", errBadState)
	}
	var st stateDoc
	d := json.NewDecoder(strings.NewReader(string(env.State)))
	d.DisallowUnknownFields()
	if err := d.Decode(&st); err != nil {
		return nil, errBadState
	}
	if err := st.validate(); err != nil {
		return nil, fmt.Errorf("holds an impossible entry (%v): it %w", err, errBadState)
	}
	return &st, nil
}

// loadState reads the state o.State holds: nil when none was saved.
func loadState(ctx context.Context, s StateStore) (*stateDoc, error) {
	b, err := s.Load(ctx)
	if errors.Is(err, ErrNoState) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st, err := decodeState(b)
	if err != nil {
		return nil, fmt.Errorf("audit: verification state in %s %w", s, err)
	}
	return st, nil
}

// stateDoc is a verification's state: per archive how far it was read
// and what it looked like, per store of the roster its logs, and the
// rolling re-check's place.
type stateDoc struct {
	Passes  uint64               `json:"passes"`
	Saved   time.Time            `json:"saved"`
	Streams map[string]streamDoc `json:"streams"`
	Witness *streamDoc           `json:"witness,omitempty"`
	Stores  map[string]storeDoc  `json:"stores"`
	// Recheck is the rolling re-check's sweep under way; LastCycle is what
	// the last whole sweep read, and how long it took.
	Recheck          *recheckDoc `json:"recheck,omitempty"`
	LastCycleRecords uint64      `json:"last_cycle_records,omitempty"`
	LastCycleSeconds float64     `json:"last_cycle_seconds,omitempty"`
}
