package lineage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rxedge/agent/queue"
)

// An operator's decision about a data file the agent refused to start over
// (queue.LeftoverError). Each is recorded in the audit journal of the data
// file the agent then uses, with who, why and which files were moved.
// Nothing is deleted: a file set aside is renamed to
// "<name>.discarded-<UTC time>" beside the data file.

// Decision says what Adopt or Discard did.
type Decision struct {
	Action   string   `json:"action"` // adopt or discard
	Path     string   `json:"path"`   // the data file
	FileID   string   `json:"file_id"`
	SetAside []string `json:"set_aside,omitempty"` // files renamed aside, by their new names
	Adopted  string   `json:"adopted,omitempty"`   // the file that became the data file
	LastSeq  uint64   `json:"last_seq"`
}

// ErrNothingToDecide is returned when the data directory holds nothing the
// agent would refuse.
var ErrNothingToDecide = errors.New("lineage: the agent would start on this data directory as it is: there is nothing to adopt or discard")

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// setAside renames p beside itself with a discarded suffix and returns
// the new name.
func setAside(p string, now time.Time) (string, error) {
	to := p + ".discarded-" + now.UTC().Format("20060102T150405Z")
	if err := os.Rename(p, to); err != nil {
		return "", err
	}
	return to, nil
}

// Adopt takes what the agent refused to start over as the data file: a
// compaction's leftover for a missing (or newer, emptier) data file, or a
// data file its directory's marker does not name. The agent must be
// stopped.
func Adopt(path, store, actor, reason string) (Decision, error) {
	d := Decision{Action: "adopt", Path: path}
	if reason == "" {
		return d, queue.ErrNoReason
	}
	lerr := queue.CheckLeftovers(path)
	var le *queue.LeftoverError
	if !errors.As(lerr, &le) {
		if lerr != nil {
			return d, lerr
		}
		return d, ErrNothingToDecide
	}
	if !le.Adoptable {
		return d, fmt.Errorf("lineage: nothing here can be adopted (%s): restore the data file from a backup (the agent reports it as restored and continues after central's record), or run `agent data discard`", le.Why)
	}
	now := time.Now()
	tmp := path + queue.CompactSuffix
	if exists(tmp) {
		if err := checkFile(tmp, store); err != nil {
			return d, err
		}
		if exists(path) {
			aside, err := setAside(path, now)
			if err != nil {
				return d, err
			}
			d.SetAside = append(d.SetAside, aside)
		}
		if err := os.Rename(tmp, path); err != nil {
			return d, err
		}
		d.Adopted = filepath.Base(tmp)
	} else {
		d.Adopted = filepath.Base(path)
	}
	return d, record(path, store, actor, reason, &d)
}

// checkFile opens p read-only and checks it is a data file of store.
func checkFile(p, store string) error {
	q, err := queue.Open(queue.Options{Path: p, StoreID: store, ReadOnly: true})
	if errors.Is(err, queue.ErrOldLayout) {
		return nil // of store, and upgraded when the agent opens it
	}
	if err != nil {
		return fmt.Errorf("lineage: %s cannot be adopted: %w", p, err)
	}
	return q.Close()
}

// Discard sets aside what the agent refused to start over and lets it
// start: a compaction leftover is renamed aside; a marker of a missing
// file is renamed aside and a new data file is made; a data file the
// marker does not name is renamed aside and a new one is made. What the
// set-aside file held that never reached central is reported by
// reconciliation (a new file continues after central's record).
func Discard(path, store, actor, reason string) (Decision, error) {
	d := Decision{Action: "discard", Path: path}
	if reason == "" {
		return d, queue.ErrNoReason
	}
	lerr := queue.CheckLeftovers(path)
	if !errors.Is(lerr, queue.ErrLeftover) {
		if lerr != nil {
			return d, lerr
		}
		return d, ErrNothingToDecide
	}
	now := time.Now()
	tmp := path + queue.CompactSuffix
	marker := path + queue.MarkerSuffix
	switch {
	case exists(tmp):
		aside, err := setAside(tmp, now)
		if err != nil {
			return d, err
		}
		d.SetAside = append(d.SetAside, aside)
		if !exists(path) && exists(marker) {
			aside, err := setAside(marker, now)
			if err != nil {
				return d, err
			}
			d.SetAside = append(d.SetAside, aside)
		}
	case !exists(path):
		aside, err := setAside(marker, now)
		if err != nil {
			return d, err
		}
		d.SetAside = append(d.SetAside, aside)
	default:
		aside, err := setAside(path, now)
		if err != nil {
			return d, err
		}
		d.SetAside = append(d.SetAside, aside)
		if aside, err := setAside(marker, now); err == nil {
			d.SetAside = append(d.SetAside, aside)
		}
	}
	return d, record(path, store, actor, reason, &d)
}

// record opens the data file (creating it after a discard), journals the
// decision and writes the directory's marker.
func record(path, store, actor, reason string, d *Decision) error {
	q, err := queue.Open(queue.Options{Path: path, StoreID: store})
	if err != nil {
		return err
	}
	defer q.Close()
	detail := map[string]string{"decision": d.Action}
	if d.Adopted != "" {
		detail["adopted"] = d.Adopted
	}
	for i, s := range d.SetAside {
		detail[fmt.Sprintf("set_aside_%d", i+1)] = filepath.Base(s)
	}
	if err := q.Adopt(actor, reason, detail); err != nil {
		return err
	}
	d.FileID = q.Lineage().FileID
	if d.LastSeq, err = q.LastSeq(); err != nil {
		return err
	}
	if err := queue.WriteMarker(path, d.FileID); err != nil {
		return err
	}
	return q.Close()
}
