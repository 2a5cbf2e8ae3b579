package notary

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/internal/disk"
	"github.com/rxedge/agent/queue"
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
// then the verifier key line. It reads only a regular file at path
// itself: a symbolic link (even to a key), a directory, a device or a
// pipe is refused, as is a file longer than a key file can be, so nothing
// put in the key file's place is read, waited on or taken for the key.
func LoadKey(path, store string) (*Key, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s", ErrNoKey, path)
	}
	if err != nil {
		return nil, fmt.Errorf("notary: read the signing key: %w", err)
	}
	if err := regularKeyFile(path, fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, fmt.Errorf("notary: read the signing key: %w", err)
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("notary: read the signing key: %w", err)
	}
	if !os.SameFile(fi, opened) {
		return nil, fmt.Errorf("notary: the signing key file %s was replaced while it was read: try again", path)
	}
	if opened.Size() > maxKeyFile {
		return nil, fmt.Errorf("notary: the signing key file %s is not a key file (%d bytes; a key file has fewer than %d)", path, opened.Size(), maxKeyFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("notary: read the signing key: %w", err)
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("notary: the signing key file %s is not a key file (too long)", path)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
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

// regularKeyFile refuses what is at path, described by fi (not followed),
// unless it is a regular file.
func regularKeyFile(path string, fi fs.FileInfo) error {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return fmt.Errorf("notary: the signing key file %s is a symbolic link: the key is read only from a regular file at that path (move the key file itself there, or set ledger.key_file to where it is)", path)
	case m.IsDir():
		return fmt.Errorf("notary: the signing key file %s is a directory, not a key file: move it away (the agent then makes a new key, whose public key goes into the roster) or set ledger.key_file", path)
	case !m.IsRegular():
		return fmt.Errorf("notary: the signing key file %s is not a regular file (%s): move it away or set ledger.key_file", path, m.Type())
	}
	return nil
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

// writeNew writes b to path through a synced temporary file linked (or,
// where the filesystem has no hard links, renamed) into place, never
// replacing a file.
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
	if err := queue.OwnLikeDir(tmp.Name()); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		// A filesystem without hard links: rename, once nothing is
		// there (only the agent and an operator's command write keys).
		if _, serr := os.Lstat(path); serr == nil {
			return fs.ErrExist
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			return err
		}
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
// key file is kept beside it as path.old-<UTC time> when keep is set (a
// kept key is never overwritten), else removed. The new key is written
// whole before the old one is touched, and takes its place with one
// rename: a crash leaves the old key or the new one. A running agent
// signs with the new key from its next checkpoint on (it reads the key
// file for each).
func RotateKey(path, store string, keep bool, now time.Time) (Rotation, error) {
	var r Rotation
	old, err := LoadKey(path, store)
	switch {
	case errors.Is(err, ErrNoKey):
	case err != nil:
		return r, err
	default:
		r.Old = old.VKey
	}
	skey, vkey, err := ledger.GenerateKey(rand.Reader, store)
	if err != nil {
		return r, err
	}
	next := path + ".new"
	if _, err := os.Lstat(next); err == nil {
		// A rotation that stopped before its rename left a whole key
		// there (it is written before it is linked in): only that is
		// removed, never a file the rotation did not make.
		if _, lerr := LoadKey(next, store); lerr != nil {
			return r, fmt.Errorf("notary: %s is in the way of the new key and is not a key a rotation left: move it away", next)
		}
		if err := os.Remove(next); err != nil {
			return r, fmt.Errorf("notary: remove the key an earlier rotation left: %w", err)
		}
	}
	if err := writeNew(next, []byte(skey+"\n"+vkey+"\n")); err != nil {
		return r, fmt.Errorf("notary: write the new signing key: %w", err)
	}
	defer os.Remove(next)
	if old != nil && keep {
		base := path + ".old-" + now.UTC().Format("20060102T150405Z")
		for i := 0; ; i++ {
			aside := base
			if i > 0 {
				aside = fmt.Sprintf("%s-%d", base, i)
			}
			err := os.Link(path, aside)
			if err == nil {
				r.Kept = aside
				break
			}
			if !errors.Is(err, fs.ErrExist) || i == 100 {
				return r, fmt.Errorf("notary: keep the old key: %w", err)
			}
		}
	}
	if err := os.Rename(next, path); err != nil {
		return r, fmt.Errorf("notary: put the new key in place: %w", err)
	}
	if err := disk.SyncDir(filepath.Dir(path)); err != nil {
		return r, err
	}
	r.New = vkey
	return r, nil
}
