package audit_test

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/nats-io/nats.go"
	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/testkit/ledgertest"
)

func newWitness(t *testing.T, r *rig, state string) (*audit.Witness, note.Signer, note.Verifier, string) {
	t.Helper()
	skey, vkey, err := audit.GenerateWitnessKey(rand.Reader, "")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	v, _ := note.NewVerifier(vkey)
	return openWitness(t, r, state, signer), signer, v, vkey
}

// openWitness starts a witness on its state file, as after a restart.
func openWitness(t *testing.T, r *rig, state string, signer note.Signer) *audit.Witness {
	t.Helper()
	w, err := audit.NewWitness(r.ctx, audit.WitnessOptions{Conn: r.nc, Roster: r.roster, Signer: signer, StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func witnessMsgs(t *testing.T, r *rig) uint64 {
	t.Helper()
	st, err := r.js.Stream(r.ctx, central.WitnessStreamName)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

func TestWitnessCountersignsAndVerifyChecksIt(t *testing.T) {
	r := newRig(t)
	state := filepath.Join(t.TempDir(), "witness.json")
	w, signer, wv, _ := newWitness(t, r, state)
	run, err := w.Once(r.ctx)
	if err != nil || run.Countersigned != 5 || len(run.Refused) != 0 {
		t.Fatalf("first pass: %+v %v", run, err)
	}
	withWitness := func(o *audit.Options) { o.Witness = wv }
	rep := r.verify(t, withWitness)
	expectOK(t, rep)
	for _, l := range rep.Logs {
		if l.Witnessed != l.Latest {
			t.Errorf("log %+v: witnessed %d, latest %d", l, l.Witnessed, l.Latest)
		}
	}
	// Nothing new: nothing countersigned again.
	if run, err := w.Once(r.ctx); err != nil || run.Countersigned != 0 || run.Read != 0 {
		t.Fatalf("idle pass: %+v %v", run, err)
	}
	// A crash between publishing a countersignature and saving the state:
	// the state file as it was before the pass. At start the witness
	// takes the countersignature it published from the witness stream,
	// skips the checkpoint when it reads it again, and all still holds.
	before, _ := os.ReadFile(state)
	r.a.Movements(r.ctx, t, r.js, 5)
	r.a.Checkpoint(r.ctx, t, r.js)
	r.records += 6
	r.wait(t)
	if run, err := w.Once(r.ctx); err != nil || run.Countersigned != 1 {
		t.Fatalf("pass after new checkpoint: %+v %v", run, err)
	}
	if err := os.WriteFile(state, before, 0o600); err != nil {
		t.Fatal(err)
	}
	w2 := openWitness(t, r, state, signer)
	if run, err := w2.Once(r.ctx); err != nil || run.Countersigned != 0 || run.Skipped != 1 {
		t.Fatalf("pass after the lost save: %+v %v", run, err)
	}
	if n := witnessMsgs(t, r); n != 6 {
		t.Errorf("witness stream holds %d checkpoints, want 6", n)
	}
	rep = r.verify(t, withWitness)
	if !rep.OK() {
		t.Fatalf("after the repeat: %s", dump(rep))
	}
	// A witness key that did not countersign: every countersignature fails.
	_, other, _ := audit.GenerateWitnessKey(rand.Reader, "")
	ov, _ := note.NewVerifier(other)
	rep = r.verify(t, func(o *audit.Options) { o.Witness = ov })
	if rep.OK() || rep.Counts[audit.KindBadSignature] != 6 {
		t.Errorf("another witness key: %s", dump(rep))
	}
}

func TestWitnessRefusesForkAndForgery(t *testing.T) {
	r := newRig(t)
	w, _, wv, _ := newWitness(t, r, filepath.Join(t.TempDir(), "witness.json"))
	if _, err := w.Once(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.a.Movements(r.ctx, t, r.js, 10)
	r.a.Fork(r.ctx, t, r.js, 4)
	r.records += 11
	r.wait(t)
	run, err := w.Once(r.ctx)
	if err != nil || run.Countersigned != 0 || run.Refused[audit.RefusedForked] != 1 {
		t.Fatalf("fork: %+v %v", run, err)
	}
	rep := r.verify(t, func(o *audit.Options) { o.Witness = wv })
	expect(t, rep, audit.Finding{Kind: audit.KindForked, Store: "S0042", Log: r.a.Log})
	for _, l := range rep.Logs {
		if l.Store == "S0042" && l.Witnessed != 60 {
			t.Errorf("witnessed up to %d, want 60", l.Witnessed)
		}
	}
	// Another store's key over S0043's log: refused.
	ledgertest.PublishForged(r.ctx, t, r.js, r.a.Signer, "S0043", r.b.Log, 11)
	r.records++
	r.wait(t)
	run, err = w.Once(r.ctx)
	if err != nil || run.Countersigned != 0 || run.Refused[audit.RefusedBadSignature] != 1 {
		t.Fatalf("forgery: %+v %v", run, err)
	}
}

// editState rewrites the state file's JSON through edit, as a hand would,
// leaving its signature as it was.
func editState(t *testing.T, path string, edit func(st map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	st, ok := f["state"].(map[string]any)
	if !ok {
		t.Fatalf("the state file has no state object: %s", b)
	}
	edit(st)
	if b, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWitnessStateAttacked starts the witness on a state file that was
// truncated, replaced by garbage, grown huge, edited by hand (a log's size
// made smaller, its root changed, its read position moved), or signed by
// another key: each is refused with an error that names the file and what
// to do, never its content, and nothing more is countersigned. A state
// file rolled back to an older copy, or removed, with messages of another
// key in the witness stream besides: the witness takes its own
// countersignatures from the stream, and the store's fork offered
// meanwhile is refused, never countersigned.
func TestWitnessStateAttacked(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "witness.state")
	w, signer, wv, _ := newWitness(t, r, state)
	if run, err := w.Once(r.ctx); err != nil || run.Countersigned != 5 {
		t.Fatalf("first pass: %+v %v", run, err)
	}
	first, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	// Two more checkpoints of S0042, countersigned: the state is now 2
	// countersignatures ahead of first.
	for range 2 {
		r.a.Movements(r.ctx, t, r.js, 5)
		r.a.Checkpoint(r.ctx, t, r.js)
		r.records += 6
	}
	r.wait(t)
	if run, err := w.Once(r.ctx); err != nil || run.Countersigned != 2 {
		t.Fatalf("second pass: %+v %v", run, err)
	}
	good, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	// What the attacks would serve: S0042 signs a checkpoint of size 75
	// whose tree rewrites a movement under the size-70 checkpoint the
	// witness countersigned, with its proof from 70.
	r.a.Movements(r.ctx, t, r.js, 5)
	r.a.Fork(r.ctx, t, r.js, 4)
	r.records += 6
	// And one of size 80 that rewrites sequence 65, with its proof from
	// 60: to a witness that believes it countersigned 60 last, it is
	// consistent.
	r.a.Movements(r.ctx, t, r.js, 5)
	r.a.ForkFrom(r.ctx, t, r.js, 60, 64)
	r.records += 6
	r.wait(t)
	key := "S0042/" + r.a.Log
	const marker = "Z9MARKERZ9"
	_, otherSkey, _, err := func() (string, string, string, error) {
		s, v, err := audit.GenerateWitnessKey(rand.Reader, "")
		return "", s, v, err
	}()
	if err != nil {
		t.Fatal(err)
	}
	otherSigner, err := note.NewSigner(otherSkey)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		signer note.Signer
		setup  func(t *testing.T)
		want   string
	}{
		{name: "truncated", setup: func(t *testing.T) { os.WriteFile(state, good[:len(good)/2], 0o600) }, want: "does not read"},
		{name: "empty", setup: func(t *testing.T) { os.WriteFile(state, nil, 0o600) }, want: "does not read"},
		{name: "garbage", setup: func(t *testing.T) {
			b := make([]byte, 4096)
			rand.Read(b)
			os.WriteFile(state, append([]byte(marker), b...), 0o600)
		}, want: "does not read"},
		{name: "json of something else", setup: func(t *testing.T) {
			os.WriteFile(state, []byte(`{"streams":{"RX_ARCHIVE":1},"logs":{},"note":"`+marker+`"}`), 0o600)
		}, want: "does not read"},
		{name: "huge", setup: func(t *testing.T) {
			f, err := os.Create(state)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(audit.MaxWitnessState + 1); err != nil {
				t.Fatal(err)
			}
		}, want: "over"},
		{name: "a log's size made smaller", setup: func(t *testing.T) {
			os.WriteFile(state, good, 0o600)
			editState(t, state, func(st map[string]any) {
				st["logs"].(map[string]any)[key].(map[string]any)["size"] = 60
			})
		}, want: "signature does not match"},
		{name: "a log's root changed", setup: func(t *testing.T) {
			os.WriteFile(state, good, 0o600)
			editState(t, state, func(st map[string]any) {
				st["logs"].(map[string]any)[key].(map[string]any)["root"] = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
			})
		}, want: "signature does not match"},
		{name: "a log removed", setup: func(t *testing.T) {
			os.WriteFile(state, good, 0o600)
			editState(t, state, func(st map[string]any) { delete(st["logs"].(map[string]any), key) })
		}, want: "signature does not match"},
		{name: "the archive read back to the start", setup: func(t *testing.T) {
			os.WriteFile(state, good, 0o600)
			editState(t, state, func(st map[string]any) { st["streams"] = map[string]any{} })
		}, want: "signature does not match"},
		{name: "signed by another witness key", signer: otherSigner, setup: func(t *testing.T) { os.WriteFile(state, good, 0o600) }, want: "signature does not match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup(t)
			s := signer
			if tc.signer != nil {
				s = tc.signer
			}
			_, err := audit.NewWitness(r.ctx, audit.WitnessOptions{Conn: r.nc, Roster: r.roster, Signer: s, StateFile: state})
			if err == nil {
				t.Fatal("the witness started")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), state) {
				t.Errorf("error %q, want it to name the file and say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), r.a.Log) {
				t.Errorf("the error repeats the file's content: %v", err)
			}
			if n := witnessMsgs(t, r); n != 7 {
				t.Errorf("the witness stream holds %d countersignatures, want 7", n)
			}
		})
	}

	// Recoverable: the state rolled back, or gone. A message of another
	// key in the witness stream (what an answer to a request whose reply
	// subject was a witness subject leaves) is skipped.
	junk := nats.NewMsg(central.WitnessSubject("S0042"))
	junk.Data = []byte("not a countersignature\n\n— someone AAAA\n")
	if _, err := r.js.PublishMsg(r.ctx, junk); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T)
	}{
		{"the genuine state", func(t *testing.T) { os.WriteFile(state, good, 0o600) }},
		{"rolled back to an older copy", func(t *testing.T) { os.WriteFile(state, first, 0o600) }},
		{"removed", func(t *testing.T) { os.Remove(state) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup(t)
			w := openWitness(t, r, state, signer)
			run, err := w.Once(r.ctx)
			if err != nil || run.Countersigned != 0 || run.Refused[audit.RefusedForked] != 1 || run.Refused[audit.RefusedUnprovable] != 1 {
				t.Fatalf("the forks after the state %s: %+v %v; want both refused", tc.name, run, err)
			}
			if n := witnessMsgs(t, r); n != 8 {
				t.Errorf("the witness stream holds %d messages, want the 7 countersignatures and the junk", n)
			}
			if got := fmt.Sprint(w.Witnessed()); got != "[S0042/"+r.a.Log+" 70 S0043/"+r.b.Log+" 10]" {
				t.Errorf("witnessed %s, want S0042 at 70 and S0043 at 10", got)
			}
		})
	}
	rep := r.verify(t, func(o *audit.Options) { o.Witness = wv })
	for _, l := range rep.Logs {
		if l.Store == "S0042" && l.Witnessed != 70 {
			t.Errorf("witnessed up to %d, want 70", l.Witnessed)
		}
	}

	// Both parties at once: the witness's state rolled back to 60, and
	// central's administrator recreating the archive without the
	// checkpoints of 65 and 70, so that the fork from 60 is the next one
	// the witness reads. Its countersignatures in the witness stream
	// still say 70.
	os.WriteFile(state, first, 0o600)
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		var out []ledgertest.Record
		for _, rec := range recs {
			if _, size, err := ledger.ParseCheckpointMsgID(rec.Token()); err == nil && (size == 65 || size == 70) {
				continue
			}
			out = append(out, rec)
		}
		return out
	})
	w = openWitness(t, r, state, signer)
	run, err := w.Once(r.ctx)
	if err != nil || run.Countersigned != 0 || run.Refused[audit.RefusedUnprovable] != 1 {
		t.Fatalf("the fork from 60 after the state and the archive rolled back: %+v %v; want it refused", run, err)
	}
}

// TestWitnessStreamConfigHoldsACountersignature: the witness stream
// takes the largest checkpoint note a checkpoint message can hold with
// the witness's signature added.
func TestWitnessStreamConfigHoldsACountersignature(t *testing.T) {
	if got := central.WitnessStreamConfig(central.StreamOptions{}).MaxMsgSize; got < ledger.MaxMessage+1024 {
		t.Errorf("the witness stream's max_msg_size %d is under a checkpoint message and a signature line (%d)", got, ledger.MaxMessage+1024)
	}
}

// TestWitnessStreamRecreated: RX_WITNESS deleted and created again (its
// sequences start again). The witness goes on from its state, follows
// the new stream's sequences, and after a lost save takes its
// countersignature from the new stream.
func TestWitnessStreamRecreated(t *testing.T) {
	r := newRig(t)
	state := filepath.Join(t.TempDir(), "witness.state")
	w, signer, _, _ := newWitness(t, r, state)
	if run, err := w.Once(r.ctx); err != nil || run.Countersigned != 5 {
		t.Fatalf("first pass: %+v %v", run, err)
	}
	if err := r.js.DeleteStream(r.ctx, central.WitnessStreamName); err != nil {
		t.Fatal(err)
	}
	w = openWitness(t, r, state, signer) // creates it again: a development hub
	if run, err := w.Once(r.ctx); err != nil || run.Countersigned != 0 {
		t.Fatalf("pass on the new stream: %+v %v", run, err)
	}
	before, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	r.a.Movements(r.ctx, t, r.js, 5)
	r.a.Checkpoint(r.ctx, t, r.js)
	r.records += 6
	r.wait(t)
	if run, err := w.Once(r.ctx); err != nil || run.Countersigned != 1 {
		t.Fatalf("the new checkpoint: %+v %v", run, err)
	}
	if err := os.WriteFile(state, before, 0o600); err != nil {
		t.Fatal(err)
	}
	w = openWitness(t, r, state, signer)
	if run, err := w.Once(r.ctx); err != nil || run.Countersigned != 0 || run.Skipped != 1 {
		t.Fatalf("after the lost save: %+v %v; want the checkpoint taken from the new stream", run, err)
	}
}
