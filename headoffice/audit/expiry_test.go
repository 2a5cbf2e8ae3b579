package audit_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/audit"
)

// setMaxAge changes the archive's max_age, as its administrator can.
func setMaxAge(t *testing.T, r *rig, age time.Duration) {
	t.Helper()
	st, err := r.js.Stream(r.ctx, central.ArchiveStreamName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge, cfg.Duplicates = age, min(cfg.Duplicates, age)
	if _, err := r.js.UpdateStream(r.ctx, cfg); err != nil {
		t.Fatalf("set the archive's max_age to %s: %v", age, err)
	}
}

// archiveState is the archive's state now.
func archiveState(t *testing.T, r *rig) jetstream.StreamState {
	t.Helper()
	st, err := r.js.Stream(r.ctx, central.ArchiveStreamName)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State
}

// waitEmptied waits until the archive holds no record, for a minute.
func waitEmptied(t *testing.T, r *rig) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for archiveState(t, r).Msgs > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the archive still holds %d records after a minute of waiting for its max_age", archiveState(t, r).Msgs)
		}
		time.Sleep(50 * time.Millisecond) // polled: awaiting the server's expiry of old records
	}
}

// Records the archive's max_age lets go of after a pass verified them
// are not a finding; records its max_age still kept that are gone are,
// though the max_age that took them was set back before the next pass.
// A max_age shortened is a finding by itself.
func TestIncrementalTellsAgingFromRemoval(t *testing.T) {
	t.Parallel()
	t.Run("aged out", func(t *testing.T) {
		r := newRig(t)
		setMaxAge(t, r, 8*time.Second) // the rig's records were stored just now
		state := filepath.Join(t.TempDir(), "verify.state")
		expectOK(t, r.pass(t, state, noRecheck))
		if s := archiveState(t, r); s.FirstSeq != 1 {
			t.Fatalf("records aged out before the first pass ended (first sequence %d): the machine is slower than the test allows", s.FirstSeq)
		}
		waitEmptied(t, r)
		rep := r.pass(t, state)
		t.Log("after aging:\n" + dump(rep))
		if !rep.OK() || rep.Counts[audit.KindArchiveRewritten] != 0 || !strings.Contains(strings.Join(rep.Notes, "\n"), "sequences 1-75 aged out") {
			t.Fatalf("records aged out: ok=%v\n%s", rep.OK(), dump(rep))
		}
		r.a.Movements(r.ctx, t, r.js, 5)
		r.a.Checkpoint(r.ctx, t, r.js)
		r.records += 6
		for deadline := time.Now().Add(time.Minute); archiveState(t, r).LastSeq < r.records; {
			if time.Now().After(deadline) {
				t.Fatalf("the archive did not reach sequence %d in a minute", r.records)
			}
			time.Sleep(20 * time.Millisecond) // polled: awaiting the archive's sourcing
		}
		if rep := r.pass(t, state); !rep.OK() || rep.Records != 6 || logOf(t, rep, "S0042").Matched != 65 {
			t.Fatalf("after the records aged out, 6 new ones: %d read\n%s", rep.Records, dump(rep))
		}
	})
	t.Run("removed by a max_age shortened and set back", func(t *testing.T) {
		r := newRig(t)
		state := filepath.Join(t.TempDir(), "verify.state")
		expectOK(t, r.pass(t, state, noRecheck))
		setMaxAge(t, r, time.Second)
		waitEmptied(t, r)
		setMaxAge(t, r, central.DefaultRetention)
		rep := r.pass(t, state, noRecheck)
		expect(t, rep, audit.Finding{Kind: audit.KindArchiveRewritten},
			audit.Finding{Kind: audit.KindMissing, Store: "S0042", From: 1, To: 60}, audit.Finding{Kind: audit.KindCheckpointMissing, Store: "S0042"},
			audit.Finding{Kind: audit.KindMissing, Store: "S0043", From: 1, To: 10}, audit.Finding{Kind: audit.KindCheckpointMissing, Store: "S0043"})
		if f := failing(rep)[0]; !strings.Contains(f.Detail, "not aged out") {
			t.Errorf("finding %+v: want the removal told from aging", f)
		}
	})
	t.Run("max_age shortened", func(t *testing.T) {
		r := newRig(t)
		state := filepath.Join(t.TempDir(), "verify.state")
		expectOK(t, r.pass(t, state, noRecheck))
		setMaxAge(t, r, 365*24*time.Hour)
		rep := r.pass(t, state, noRecheck)
		expect(t, rep, audit.Finding{Kind: audit.KindArchiveRewritten})
		if f := failing(rep)[0]; !strings.Contains(f.Detail, "max_age was shortened") {
			t.Errorf("finding %+v: want the max_age named", f)
		}
	})
}
