package notary

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/internal/disk"
)

// KeyFileName is the key file's name in the data directory, its default
// place.
const KeyFileName = "ledger.key"

// maxKeyFile bounds the key file read.
const maxKeyFile = 4 << 10

// Key is a store's signing key.
type Key struct {
	Signer note.Signer
	// VKey is the verifier key that goes into the roster after the store
	// id ("S0042 <vkey>").
	VKey string
}

// ErrNoKey is returned by LoadKey when the key file does not exist.
var ErrNoKey = errors.New("notary: no signing key")

// LoadKey reads the key file of store at path: the private key line,
// then the verifier key line.
func LoadKey(path, store string) (*Key, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s", ErrNoKey, path)
	}
	if err != nil {
		return nil, fmt.Errorf("notary: read the signing key: %w", err)
	}
	defer f.Close()
	b := make([]byte, maxKeyFile+1)
	n, _ := f.Read(b)
	if n > maxKeyFile {
		return nil, fmt.Errorf("notary: the signing key file %s is not a key file (too long)", path)
	}
	lines := strings.Split(strings.TrimSpace(string(b[:n])), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("notary: the signing key file %s is not a key file (two lines: the private key, the verifier key)", path)
	}
	s, err := note.NewSigner(strings.TrimSpace(lines[0]))
	if err != nil {
		return nil, fmt.Errorf("notary: the signing key file %s holds no valid private key", path)
	}
	vkey := strings.TrimSpace(lines[1])
	v, err := note.NewVerifier(vkey)
	if err != nil || v.KeyHash() != s.KeyHash() || v.Name() != s.Name() {
		return nil, fmt.Errorf("notary: the signing key file %s holds a verifier key that is not its private key's", path)
	}
	if s.Name() != ledger.KeyName(store) {
		return nil, fmt.Errorf("notary: the signing key in %s is named %q, not %q: it is another store's", path, s.Name(), ledger.KeyName(store))
	}
	return &Key{Signer: s, VKey: vkey}, nil
}

// CreateKey makes a new key for store and writes it to path, which must
// not exist: the file appears complete or not at all, readable by its
// owner only (on Windows it takes its directory's protected ACL, which
// install sets).
func CreateKey(path, store string) (*Key, error) {
	skey, vkey, err := ledger.GenerateKey(rand.Reader, store)
	if err != nil {
		return nil, err
	}
	if err := writeNew(path, []byte(skey+"\n"+vkey+"\n")); err != nil {
		return nil, fmt.Errorf("notary: write the signing key %s: %w", path, err)
	}
	return LoadKey(path, store)
}

// writeNew writes b to path through a synced temporary file linked into
// place, never replacing a file.
func writeNew(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return err
	}
	return disk.SyncDir(dir)
}

// Rotation is what RotateKey did.
type Rotation struct {
	Old, New string // verifier keys ("" when there was no old key)
	// Kept is where the old key file was moved, "" when it was removed.
	Kept string
}

// RotateKey replaces the key at path with a new one for store. The old
// key file is moved aside to path.old-<UTC time> when keep is set, else
// removed. A running agent signs with the new key from its next
// checkpoint on (it reads the key file for each).
func RotateKey(path, store string, keep bool, now time.Time) (Rotation, error) {
	var r Rotation
	old, err := LoadKey(path, store)
	switch {
	case errors.Is(err, ErrNoKey):
	case err != nil:
		return r, err
	default:
		r.Old = old.VKey
		aside := path + ".old-" + now.UTC().Format("20060102T150405Z")
		if err := os.Rename(path, aside); err != nil {
			return r, fmt.Errorf("notary: move the old key aside: %w", err)
		}
		if keep {
			r.Kept = aside
		} else if err := os.Remove(aside); err != nil {
			return r, fmt.Errorf("notary: remove the old key: %w", err)
		}
	}
	k, err := CreateKey(path, store)
	if err != nil {
		return r, err
	}
	r.New = k.VKey
	return r, nil
}
