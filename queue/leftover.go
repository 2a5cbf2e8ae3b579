package queue

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/rxedge/agent/internal/disk"
	bolt "go.etcd.io/bbolt"
)

// MarkerSuffix names the file beside the data file that records the
// identity of the data file its directory holds: "<path>.id". The agent
// writes it once the file exists; a marker without its data file means
// the directory held a file that is gone, and the agent does not start
// an empty one over it.
//
// The marker holds one identity a line. It holds two only while the file
// changes its identity (Confirm, for a restored copy): the identity it
// has and the one it takes, written before the file's transaction, so
// that a crash or a power cut at any moment leaves a marker naming the
// file beside it. The next open writes the one identity again.
const MarkerSuffix = ".id"

// ErrLeftover is wrapped by the errors of a data file that is missing or
// replaced while something beside it says it held movements: the agent
// does not start over it without an operator's decision.
var ErrLeftover = errors.New("queue: leftover of a data file")

// LeftoverError says what was found and what an operator may do.
type LeftoverError struct {
	Path string // the data file
	// Why in words, naming files and identities, never movement data.
	Why string
	// Adoptable is true when `agent data adopt` can take a leftover file
	// as the data file.
	Adoptable bool
}

func (e *LeftoverError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the agent will not start over %s: %s. ", e.Path, e.Why)
	if e.Adoptable {
		b.WriteString("To keep the leftover file as the data file (nothing it holds is lost), run `agent data adopt --reason TEXT`; ")
	}
	b.WriteString("to set it aside and start a new data file (it is renamed, not deleted; what it held and never reached central is reported by reconciliation), run `agent data discard --reason TEXT`. Both are recorded in the audit journal")
	return b.String()
}

func (e *LeftoverError) Unwrap() error { return ErrLeftover }

// fileFacts are what a leftover's meta says, read without its lock.
type fileFacts struct {
	ok      bool // a readable agent data file
	store   string
	id      string
	created uint64
	lastSeq uint64
	foreign string // the unknown file central named (Lineage.Foreign)
}

// readFacts reads what the meta of the file at path says. The file may be
// a compaction's new file that a power cut left part-written (it is only
// synced before its rename): its meta may name pages past its end, or
// pages that hold something else. bbolt maps the file into memory, and
// touching a page past the end of a mapped file raises SIGBUS, which would
// kill the process; so a file too short for the pages its meta names is
// not read, and a fault or a bbolt assertion while reading one is taken
// as what it is, a copy cut short (not a complete agent file).
func readFacts(path string) (f fileFacts) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() < minFileSize {
		return fileFacts{}
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var db *bolt.DB
	defer func() {
		if recover() != nil {
			f = fileFacts{}
		}
		if db != nil {
			db.Close()
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	if err != nil {
		return fileFacts{}
	}
	db.View(func(tx *bolt.Tx) error {
		if tx.Size() > fi.Size() {
			return nil // its meta names pages past its end
		}
		f = factsOf(tx)
		return nil
	})
	return f
}

// minFileSize is the smallest size of a complete data file: bbolt writes
// its first four pages (two meta pages, the freelist, the root leaf) when
// it creates a file, and its pages are 4 KiB or more. A shorter file could
// make bbolt's open read the second meta page past the file's end; a fault
// there is still recovered, but leaves that file's descriptor open.
const minFileSize = 4 * 4096

func factsOf(tx *bolt.Tx) fileFacts {
	meta := tx.Bucket(bucketMeta)
	if meta == nil || meta.Get(metaSchema) == nil {
		return fileFacts{}
	}
	return fileFacts{ok: true, store: string(meta.Get(metaStore)), id: string(meta.Get(metaFileID)),
		created: getU64(meta, metaCreated), lastSeq: getU64(meta, metaNextSeq), foreign: string(meta.Get(metaForeign))}
}

// sameLineage reports whether a leftover copy holds nothing the data file
// lacks: it is a copy of the same file (same identity, or for files
// without one the same creation time) no further along.
func (f fileFacts) heldBy(data fileFacts) bool {
	if !f.ok {
		return true // not a complete agent file: a copy cut short
	}
	if !data.ok || f.store != data.store {
		return false
	}
	same := f.id != "" && f.id == data.id || f.id == "" && f.created == data.created
	return same && f.lastSeq <= data.lastSeq
}

// checkMissing is called before a missing data file is created: a
// compaction's new file or an identity marker beside it means the
// directory held a data file, and starting empty would hide it.
func checkMissing(path string) error {
	if fi, err := os.Stat(path + CompactSuffix); err == nil && fi.Mode().IsRegular() {
		f := readFacts(path + CompactSuffix)
		why := fmt.Sprintf("the data file is missing but %s is beside it", filepath.Base(path+CompactSuffix))
		if f.ok {
			why += fmt.Sprintf(" (a complete data file of store %s, file %s, last sequence %d)", f.store, orNone(f.id), f.lastSeq)
		}
		return &LeftoverError{Path: path, Why: why, Adoptable: f.ok}
	}
	if ids, err := readMarker(path); err == nil {
		return &LeftoverError{Path: path, Why: fmt.Sprintf("the data file is missing, but this directory held data file %s (%s)", orNone(strings.Join(ids, " or ")), filepath.Base(path+MarkerSuffix))}
	}
	return nil
}

// maxMarker bounds what is read of a marker: a few identities, never a
// file someone put in its place.
const maxMarker = 4096

// readMarker reads the identities the marker beside path names (none for
// an empty marker); an error when there is no marker to read.
func readMarker(path string) ([]string, error) {
	f, err := os.Open(path + MarkerSuffix)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMarker))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

func orNone(id string) string {
	if id == "" {
		return "(no identity)"
	}
	return id
}

// CheckLeftovers says whether the agent may open the data file at path:
// a missing file with a leftover or marker beside it, a file that is not
// the one its directory's marker names, or a compaction's leftover that
// may hold movements the data file lacks are refused with a
// *LeftoverError. A leftover that holds nothing the file lacks is not an
// obstacle (compaction removes it).
func CheckLeftovers(path string) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return checkMissing(path)
	}
	data := readFacts(path)
	if !data.ok {
		return nil // opening it reports what is wrong with it
	}
	if data.foreign != "" {
		return &LeftoverError{Path: path, Adoptable: true,
			Why: fmt.Sprintf("central's record of the store names data file %s, which this file (%s) does not know: another data file gives the store's sequences (a cloned PC or VM?), and this one has sent nothing since", data.foreign, orNone(data.id))}
	}
	if ids, err := readMarker(path); err == nil && len(ids) > 0 && data.id != "" && !slices.Contains(ids, data.id) {
		return &LeftoverError{Path: path, Adoptable: true,
			Why: fmt.Sprintf("the data file is file %s, but this directory held file %s (%s): the file was replaced", data.id, strings.Join(ids, " or "), filepath.Base(path+MarkerSuffix))}
	}
	return checkCompactLeftover(path, data)
}

func checkCompactLeftover(path string, data fileFacts) error {
	tmp := path + CompactSuffix
	if _, err := os.Stat(tmp); err != nil {
		return nil
	}
	left := readFacts(tmp)
	if left.heldBy(data) {
		return nil
	}
	return &LeftoverError{Path: path, Adoptable: true,
		Why: fmt.Sprintf("%s is beside it and holds what the data file may lack (store %s, file %s, last sequence %d; the data file is file %s, last sequence %d)",
			filepath.Base(tmp), left.store, orNone(left.id), left.lastSeq, orNone(data.id), data.lastSeq)}
}

// removeCompactLeftover removes <path>.compact when it holds nothing the
// data file lacks, and refuses otherwise: a compaction never deletes a
// file that may hold acknowledged movements.
func removeCompactLeftover(path string, data fileFacts) error {
	tmp := path + CompactSuffix
	if _, err := os.Stat(tmp); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := checkCompactLeftover(path, data); err != nil {
		return err
	}
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the leftover of an earlier compaction: %w", err)
	}
	return nil
}

// WriteMarker records beside the data file the identity of the file the
// directory holds, durably (written to a temporary file, synced, renamed,
// directory synced).
func WriteMarker(path, id string) error {
	return writeMarker(path, id)
}

// writeMarker records ids beside the data file, one a line, unless the
// marker names them already.
func writeMarker(path string, ids ...string) error {
	if cur, err := readMarker(path); err == nil && slices.Equal(cur, ids) {
		return nil
	}
	return disk.WriteFile(path+MarkerSuffix, []byte(strings.Join(ids, "\n")+"\n"), 0o600)
}
