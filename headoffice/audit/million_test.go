package audit_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
)

// envMillion sets TestIncrementalAfterAMillion's archive size: 1,000,000
// movements by default, 100,000 under the race detector, which slows the
// reader some tenfold.
const envMillion = "RXEDGE_AUDIT_MILLION"

// filler archives movements of a few stores and their checkpoints
// straight into an archive stream, as fast as the server takes them.
type filler struct {
	js     jetstream.JetStream
	stores []*fillStore
	n      int
}

type fillStore struct {
	id, log     string
	signer      note.Signer
	tree, prev  ledger.Frontier
	added       []ledger.Hash
	vkey        string
	next        uint64
	uncommitted int
}

func newFiller(t *testing.T, js jetstream.JetStream, stores int) *filler {
	t.Helper()
	f := &filler{js: js}
	for i := 0; i < stores; i++ {
		id := fmt.Sprintf("M%04d", i)
		skey, vkey, err := ledger.GenerateKey(rand.Reader, id)
		if err != nil {
			t.Fatal(err)
		}
		signer, _ := note.NewSigner(skey)
		log, _ := ledger.NewLogID(rand.Reader)
		f.stores = append(f.stores, &fillStore{id: id, log: log, signer: signer, vkey: vkey, next: 1})
	}
	return f
}

func (f *filler) roster(t *testing.T) *provision.Roster {
	t.Helper()
	var b strings.Builder
	for _, s := range f.stores {
		fmt.Fprintf(&b, "%s %s\n", s.id, s.vkey)
	}
	r, err := provision.ParseRoster(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fill archives n more movements, the stores in turn, each store signing
// a checkpoint every every of its movements and at the end; it returns
// how many records it archived.
func (f *filler) fill(ctx context.Context, t *testing.T, n, every int) uint64 {
	t.Helper()
	var records uint64
	for i := 0; i < n; i++ {
		s := f.stores[i%len(f.stores)]
		var l ledger.Leaf
		l.Seq = s.next
		p := []byte(fmt.Sprintf(`{"movement_id":"%s-%d","qty":%d}`, s.id, s.next, i))
		l.Digest = sha256.Sum256(p)
		k := sha256.Sum256([]byte(s.id + strconv.FormatUint(s.next, 10)))
		copy(l.Key[:], k[:16])
		s.next++
		s.tree.Append(l.Hash())
		s.added = append(s.added, l.Hash())
		m := nats.NewMsg(central.ArchiveSubject(s.id))
		m.Header.Set(central.HeaderMsgID, central.MsgID(hex.EncodeToString(l.Key[:]), hex.EncodeToString(l.Digest[:])))
		m.Header.Set(central.HeaderSeq, strconv.FormatUint(l.Seq, 10))
		m.Data = p
		f.publish(t, m)
		records++
		if len(s.added) == every || i >= n-len(f.stores) {
			f.publish(t, s.checkpoint(t))
			records++
		}
	}
	f.await(t)
	return records
}

func (s *fillStore) checkpoint(t *testing.T) *nats.Msg {
	t.Helper()
	c := ledger.Checkpoint{Store: s.id, Log: s.log, Size: s.tree.Size, Root: s.tree.Root(), First: 1, Time: time.Now().Add(-time.Hour).UTC()}
	proof, err := ledger.ProveConsistency(s.prev, s.added)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := ledger.Sign(c, s.signer)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := ledger.Message{Note: string(signed), PrevSize: s.prev.Size, Proof: proof}.Marshal()
	m := nats.NewMsg(central.ArchiveSubject(s.id))
	m.Header.Set(central.HeaderMsgID, ledger.CheckpointMsgID(ledger.CheckpointToken(s.log, c.Size), body))
	m.Data = body
	s.prev, s.added = s.tree.Clone(), nil
	return m
}

func (f *filler) publish(t *testing.T, m *nats.Msg) {
	t.Helper()
	if _, err := f.js.PublishMsgAsync(m); err != nil {
		t.Fatal(err)
	}
	if f.n++; f.n%4096 == 0 {
		f.await(t)
	}
}

func (f *filler) await(t *testing.T) {
	t.Helper()
	select {
	case <-f.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("the archive did not acknowledge 4,096 publishes in a minute")
	}
}

// A pass after a million movements were verified reads only what came
// since: the count its report gives is the new records, not the archive.
func TestIncrementalAfterAMillion(t *testing.T) {
	t.Parallel()
	n := 1_000_000
	if raceEnabled {
		n = 30_000 // the next pass reads the 1,000 new records whatever came before
	}
	if v := os.Getenv(envMillion); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			t.Fatalf("%s=%q is not a size of at least 1000", envMillion, v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	nc, err := nats.Connect(startHubProcess(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		t.Fatal(err)
	}
	const name = "RX_ARCHIVE_7" // an archive of its own, that the test publishes into
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{central.ArchivePrefix + ">"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	f := newFiller(t, js, 20)
	t0 := time.Now()
	total := f.fill(ctx, t, n, 1000)
	t.Logf("archived %d records in %s", total, time.Since(t0).Round(time.Millisecond))
	state := audit.FileState(filepath.Join(t.TempDir(), "verify.state"))
	o := audit.Options{Conn: nc, Roster: f.roster(t), Archives: []string{name}, State: state, RecheckBudget: -1}
	t0 = time.Now()
	rep, err := audit.Verify(ctx, o)
	if err != nil || !rep.OK() || rep.Records != total || rep.Movements != uint64(n) {
		t.Fatalf("first pass over %d records: %v, read %d (%d movements)\n%s", total, err, rep.Records, rep.Movements, dump(rep))
	}
	t.Logf("first pass: %d records in %s", rep.Records, time.Since(t0).Round(time.Millisecond))
	added := f.fill(ctx, t, 1000, 1000)
	t0 = time.Now()
	rep, err = audit.Verify(ctx, o)
	if err != nil || !rep.OK() || !rep.Incremental || rep.Records != added || rep.Movements != 1000 {
		t.Fatalf("the pass after %d verified: %v, read %d records (%d movements), want the %d new ones\n%s", total, err, rep.Records, rep.Movements, added, dump(rep))
	}
	for _, l := range rep.Logs {
		if want := int64((n + 1000) / len(f.stores)); l.Matched != want || l.Leaves != want {
			t.Fatalf("log %+v: want all %d leaves matched", l, want)
		}
	}
	t.Logf("the next pass: %d records in %s", rep.Records, time.Since(t0).Round(time.Millisecond))
}
