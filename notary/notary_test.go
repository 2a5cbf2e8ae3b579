package notary_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/natstest"
)

const store = "S0042"

func openQueue(t *testing.T) *queue.Queue {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func enqueue(t *testing.T, q *queue.Queue, prefix string, n int) {
	t.Helper()
	items := make([]movement.Prepared, n)
	for i := range items {
		p, es := movement.Prepare([]byte(fmt.Sprintf(`{"movement_id":"%s-%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, prefix, i)), store, time.Now())
		if es != nil {
			t.Fatal(es)
		}
		items[i] = p
	}
	if _, err := q.Enqueue(items); err != nil {
		t.Fatal(err)
	}
}

func newNotary(t *testing.T, q *queue.Queue, keyFile string) *notary.Notary {
	t.Helper()
	return notary.New(notary.Options{Queue: q, StoreID: store, Settings: notary.Settings{KeyFile: keyFile, CheckpointInterval: time.Minute}})
}

func verifiers(t *testing.T, vkeys ...string) note.Verifiers {
	t.Helper()
	var vs []note.Verifier
	for _, k := range vkeys {
		v, err := note.NewVerifier(k)
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return note.VerifierList(vs...)
}

// stored reads the checkpoint central holds for a log and size and checks
// it as a verifier would: the message id, the signature, the proof.
func stored(t *testing.T, srv *natstest.Server, log string, size int64, prevRoot ledger.Hash, vs note.Verifiers) ledger.Checkpoint {
	t.Helper()
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	s, err := js.Stream(t.Context(), central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	tok := ledger.CheckpointToken(log, size)
	m, err := s.GetLastMsgForSubject(t.Context(), central.Subject(store, tok))
	if err != nil {
		t.Fatalf("central holds no checkpoint %s: %v", tok, err)
	}
	if id := m.Header.Get(central.HeaderMsgID); id != ledger.CheckpointMsgID(tok, m.Data) {
		t.Fatalf("message id %q", id)
	}
	msg, err := ledger.ParseMessage(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	_, cp, err := ledger.Open([]byte(msg.Note), vs)
	if err != nil {
		t.Fatalf("open the published note: %v", err)
	}
	if err := ledger.CheckConsistency(msg.Proof, msg.PrevSize, prevRoot, cp.Size, cp.Root); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestPublishesCheckpointsOffline: checkpoints are signed while central
// is unreachable and published, in order, once it is.
func TestPublishesCheckpointsOffline(t *testing.T) {
	q := openQueue(t)
	keyFile := filepath.Join(t.TempDir(), "ledger.key")
	n := newNotary(t, q, keyFile)
	ctx := t.Context()
	if err := n.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	vkey := n.State().PublicKey
	if !strings.HasPrefix(vkey, ledger.KeyName(store)+"+") {
		t.Fatalf("public key %q", vkey)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("key file: %v, mode %v: want readable by its owner only", err, fi.Mode())
	}
	if st, _ := q.Ledger(); st.Latest != nil {
		t.Fatal("a checkpoint was signed for an empty log")
	}
	enqueue(t, q, "a", 7)
	if err := n.Tick(ctx); err != nil { // offline: signed, kept
		t.Fatal(err)
	}
	un, err := q.UnpublishedCheckpoints()
	if err != nil || len(un) != 1 || un[0].Size != 7 {
		t.Fatalf("unpublished after an offline tick: %+v, %v", un, err)
	}

	srv := natstest.StartHub(t)
	n.OnConnect(natstest.Connect(t, srv.URL()))
	if err := n.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := q.Ledger()
	if st.Published != 7 || st.Latest == nil || !st.Latest.Published {
		t.Fatalf("after publishing: %+v", st)
	}
	vs := verifiers(t, vkey)
	cp1 := stored(t, srv, st.Log, 7, ledger.Hash{}, vs)
	if cp1.Root != st.Root || cp1.First != 1 || cp1.Store != store {
		t.Fatalf("published checkpoint %+v, log %+v", cp1, st)
	}
	enqueue(t, q, "b", 5)
	if err := n.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	stored(t, srv, st.Log, 12, cp1.Root, vs)

	// The checkpoint is now the store's newest message centrally: a file
	// reading central's record at start still reads the last sequence
	// the store gave, and with the store's key knows it for its own.
	for _, key := range []string{vkey, ""} {
		last, _, err := lineage.Read(ctx, natstest.Connect(t, srv.URL()), store, key, 5*time.Second)
		if err != nil || last.Found != lineage.FoundCheckpoint || last.Signed != (key != "") || last.Seq != 12 || last.File != q.Lineage().FileID {
			t.Fatalf("central's record with a checkpoint newest, key %q: %+v, %v", key, last, err)
		}
	}
	// Nothing new: no checkpoint.
	if err := n.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if all, _ := q.Checkpoints(); len(all) != 2 {
		t.Fatalf("%d checkpoints for two growths", len(all))
	}
}

// TestLostKeyMakesANewOneAndMovementsFlow: a deleted key file stops
// nothing: the notary makes a new key, says so, and the next checkpoint is
// signed with it.
func TestLostKeyMakesANewOne(t *testing.T) {
	q := openQueue(t)
	keyFile := filepath.Join(t.TempDir(), "ledger.key")
	n := newNotary(t, q, keyFile)
	srv := natstest.StartHub(t)
	n.OnConnect(natstest.Connect(t, srv.URL()))
	enqueue(t, q, "a", 3)
	if err := n.Tick(t.Context()); err != nil {
		t.Fatal(err)
	}
	old := n.State().PublicKey
	if !n.State().KeyLost.IsZero() {
		t.Fatal("the store's first key was reported lost")
	}
	log, _ := q.Ledger()
	cp1 := stored(t, srv, log.Log, 3, ledger.Hash{}, verifiers(t, old))
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	enqueue(t, q, "b", 2)
	if err := n.Tick(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := n.State()
	if st.PublicKey == old || st.PublicKey == "" || st.KeyLost.IsZero() {
		t.Fatalf("state after the key was lost: %+v (old key %s)", st, old)
	}
	stored(t, srv, log.Log, 5, cp1.Root, verifiers(t, st.PublicKey))
	if _, _, err := ledger.Open(mustLatestNote(t, q), verifiers(t, old)); err == nil {
		t.Fatal("the checkpoint after the key was lost verifies with the lost key")
	}
	var journalled bool
	q.Events(time.Time{}, func(e queue.Event) bool {
		journalled = journalled || e.Action == queue.ActionLedger && e.Detail["public_key"] == st.PublicKey
		return true
	})
	if !journalled {
		t.Fatal("the new key is not in the journal")
	}
}

func mustLatestNote(t *testing.T, q *queue.Queue) []byte {
	t.Helper()
	st, err := q.Ledger()
	if err != nil || st.Latest == nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	return []byte(st.Latest.Note)
}

func TestRotateKey(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) {
			q := openQueue(t)
			keyFile := filepath.Join(t.TempDir(), "ledger.key")
			first, err := notary.CreateKey(keyFile, store)
			if err != nil {
				t.Fatal(err)
			}
			n := newNotary(t, q, keyFile)
			enqueue(t, q, "a", 2)
			if err := n.Tick(t.Context()); err != nil {
				t.Fatal(err)
			}
			r, err := notary.RotateKey(keyFile, store, keep, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if r.Old != first.VKey || r.New == first.VKey || (r.Kept != "") != keep {
				t.Fatalf("rotation %+v", r)
			}
			if keep {
				if k, err := notary.LoadKey(r.Kept, store); err != nil || k.VKey != first.VKey {
					t.Fatalf("old key kept at %s: %v", r.Kept, err)
				}
			}
			matches, _ := filepath.Glob(keyFile + ".old-*")
			if len(matches) != map[bool]int{false: 0, true: 1}[keep] {
				t.Fatalf("old key files %v", matches)
			}
			// The running notary signs with the new key from its next
			// checkpoint; the old checkpoints still verify with the old.
			enqueue(t, q, "b", 2)
			if err := n.Tick(t.Context()); err != nil {
				t.Fatal(err)
			}
			if n.State().PublicKey != r.New || !n.State().KeyLost.IsZero() {
				t.Fatalf("state after rotation %+v", n.State())
			}
			var journalled bool
			q.Events(time.Time{}, func(e queue.Event) bool {
				journalled = journalled || e.Action == queue.ActionLedger && e.Detail["old_public_key"] == r.Old && e.Detail["public_key"] == r.New
				return true
			})
			if !journalled {
				t.Fatal("the running notary did not journal the rotation")
			}
			cps, _ := q.Checkpoints()
			if _, _, err := ledger.Open([]byte(cps[0].Note), verifiers(t, r.Old)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := ledger.Open([]byte(cps[1].Note), verifiers(t, r.New)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLoadKeyRefuses(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.key")
	if _, err := notary.CreateKey(other, "S9999"); err != nil {
		t.Fatal(err)
	}
	if _, err := notary.LoadKey(other, store); err == nil || !strings.Contains(err.Error(), "another store's") {
		t.Fatalf("another store's key: %v", err)
	}
	if _, err := notary.CreateKey(other, "S9999"); err == nil {
		t.Fatal("CreateKey replaced an existing key file")
	}
	mine := filepath.Join(dir, "mine.key")
	k, _ := notary.CreateKey(mine, store)
	b, _ := os.ReadFile(mine)
	ok, _ := notary.CreateKey(filepath.Join(dir, "x.key"), store)
	for name, content := range map[string]string{
		"empty":        "",
		"one line":     strings.SplitN(string(b), "\n", 2)[0],
		"foreign vkey": strings.SplitN(string(b), "\n", 2)[0] + "\n" + ok.VKey + "\n",
		"garbage":      "PRIVATE+KEY+nope\nnope\n",
		"too long":     strings.Repeat("x", 5000),
	} {
		p := filepath.Join(dir, "bad.key")
		os.Remove(p)
		os.WriteFile(p, []byte(content), 0o600)
		if _, err := notary.LoadKey(p, store); err == nil {
			t.Errorf("%s: loaded", name)
		} else if strings.Contains(err.Error(), "PRIVATE") {
			t.Errorf("%s: the error shows the key: %v", name, err)
		}
	}
	_ = k
}

func TestValidate(t *testing.T) {
	s, p := notary.Config{}.Validate("ledger", "/data")
	if len(p) != 0 || s.KeyFile != filepath.Join("/data", notary.KeyFileName) || s.CheckpointInterval != time.Minute {
		t.Fatalf("defaults %+v %v", s, p)
	}
	_, p = notary.Config{CheckpointInterval: time.Millisecond}.Validate("ledger", "/data")
	if len(p) != 1 || !strings.HasPrefix(p[0], "ledger.checkpoint_interval:") {
		t.Fatalf("problems %v", p)
	}
}

// TestRotateKeyNeverOverwritesAKeptKey: two rotations in the same second,
// both keeping the old key, keep both.
func TestRotateKeyNeverOverwritesAKeptKey(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "ledger.key")
	first, err := notary.CreateKey(keyFile, store)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r1, err := notary.RotateKey(keyFile, store, true, now)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := notary.RotateKey(keyFile, store, true, now)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Kept == r2.Kept {
		t.Fatalf("both rotations kept the old key at %s", r1.Kept)
	}
	for want, p := range map[string]string{first.VKey: r1.Kept, r1.New: r2.Kept, r2.New: keyFile} {
		if k, err := notary.LoadKey(p, store); err != nil || k.VKey != want {
			t.Errorf("%s: %v, want the key %s", p, err, want)
		}
	}
	if _, err := os.Stat(keyFile + ".new"); !os.IsNotExist(err) {
		t.Errorf("the rotation left its temporary file: %v", err)
	}
}
